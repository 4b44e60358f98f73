//! `iot_bundle`: the manual for putting together smart-home devices that work
//! together. Instructions only and unlocks nothing (article 000's `iot_bundle`
//! manual); buying goes through `order_checkout`.

use skillhost_skill_sdk::{Skill, TestCase, json};

fn skill() -> Skill {
    Skill::new("iot_bundle")
        .description(
            "Smart-home bundle manual: the procedure for recommending a set of smart-home devices \
             that work together, checking compatibility, prices and stock.",
        )
        .parameters(json!({
            "type": "object",
            "properties": {
                "request": { "type": "string", "description": "What the user wants to automate or buy, in their words" },
            },
            "required": ["request"],
            "additionalProperties": false,
        }))
        .tools(["search_product", "search_knowledge"])
        .instructions(include_str!("../instructions.md"))
        .test_case(
            TestCase::new(
                "a starter bundle for a small flat",
                json!({ "request": "I want a robot vacuum and smart lights that work with one app in my 60 m2 flat" }),
            )
            .expect_tools(["search_product"]),
        )
}

skillhost_skill_sdk::export_skill!(skill);
