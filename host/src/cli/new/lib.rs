//! `{{name}}`: replace this with what the skill does.

use serde::Deserialize;
use skillhost_skill_sdk::{Outcome, Skill, TestCase, ToolErrorKind, call_tool_json, json, log};

fn skill() -> Skill {
    Skill::new("{{name}}") // the function name the LLM calls
        .version("0.1.0")
        // The LLM reads this to decide whether to call the skill: say what
        // it does and when to use it.
        .description("Looks up an order of the shop and says its status.")
        .parameters(json!({
            "type": "object",
            "properties": { "orderId": { "type": "string", "description": "The order number" } },
            "required": ["orderId"],
            "additionalProperties": false,
        }))
        .tools(["queryOrder"]) // the only tools it may call
        .instructions(include_str!("../instructions.md"))
        .test_case(
            TestCase::new("a delivered order", json!({ "orderId": "88231" }))
                .expect_tools(["queryOrder"])
                .expect_contains(["delivered"]),
        )
}

/// The input, as `parameters` describes it (the host checks it first).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Input {
    order_id: String,
}

fn run(input: Input) -> Result<Outcome, String> {
    let order_id = input.order_id;
    let order = match call_tool_json("queryOrder", &json!({ "orderId": order_id })) {
        Ok(order) => order,
        // The shop does not know the order.
        Err(error) if error.kind == ToolErrorKind::Rejected => {
            return Ok(Outcome::done(json!({
                "found": false,
                "message": format!("Order {order_id} was not found."),
            })));
        }
        Err(error) => return Err(error.to_string()),
    };
    let status = order["status"].as_str().unwrap_or("unknown");
    log::info!("order {order_id} is {status}");
    Ok(Outcome::done(json!({
        "found": true,
        "status": status,
        "message": format!("Order {order_id} is {status}."),
    })))
}

skillhost_skill_sdk::export_skill!(skill, steps: run);
