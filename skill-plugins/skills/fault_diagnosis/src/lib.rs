//! `fault_diagnosis`: the manual for troubleshooting a device. Instructions
//! only and unlocks nothing: its tools are safe to call without it (article
//! 000's fault diagnosis manual).

use skillhost_skill_sdk::{Skill, TestCase, json};

fn skill() -> Skill {
    Skill::new("fault_diagnosis")
        .description(
            "Fault diagnosis manual: the procedure for troubleshooting a device the user bought \
             (e.g. a robot vacuum that no longer picks up dust), step by step, and for deciding \
             when it needs a repair.",
        )
        .parameters(json!({
            "type": "object",
            "properties": {
                "symptom": { "type": "string", "description": "What is wrong with the device, in the user's words" },
                "model": { "type": "string", "description": "The device model, if known" },
            },
            "required": ["symptom"],
            "additionalProperties": false,
        }))
        .tools(["query_order", "diagnose_device", "search_knowledge"])
        .instructions(include_str!("../instructions.md"))
        .test_case(
            TestCase::new(
                "robot vacuum stopped picking up dust",
                json!({ "symptom": "My robot vacuum no longer picks up dust", "model": "S10 Pro" }),
            )
            .expect_tools(["search_knowledge"]),
        )
}

skillhost_skill_sdk::export_skill!(skill);
