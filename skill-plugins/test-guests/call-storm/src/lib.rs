//! Hostile guest: its steps call `queryOrder` in an unbounded loop and ignore
//! every error, including `limit-exceeded`. The tool-call budget must refuse the
//! calls and the CPU limit must end the invocation.

use skillhost_skill_sdk::{Outcome, Skill, Value, call_tool_json, json};

fn skill() -> Skill {
    Skill::new("callStorm")
        .description("Test guest: its steps call queryOrder forever, ignoring errors.")
        .instructions("Test guest; never loaded by a real host.")
        .parameters(json!({ "type": "object" }))
        .tools(["queryOrder"])
}

fn run(_: Value) -> Result<Outcome, String> {
    let args = json!({ "orderId": "88231" });
    loop {
        let _ = call_tool_json("queryOrder", &args);
    }
}

skillhost_skill_sdk::export_skill!(skill, steps: run);
