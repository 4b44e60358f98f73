//! `processRefund`: checks the order, and submits a refund only when it has been
//! delivered (article 003's refund skill, as deterministic steps).

use serde::Deserialize;
use skillhost_skill_sdk::{Outcome, Skill, TestCase, ToolErrorKind, call_tool_json, json, log};

fn skill() -> Skill {
    Skill::new("processRefund")
        .description(
            "Refund handling: checks the order status, verifies the order is eligible for a refund \
             and, if so, submits the refund request. Use it when the user asks to return an item \
             or get a refund; no need to call the order and refund tools step by step.",
        )
        .parameters(json!({
            "type": "object",
            "properties": {
                "orderId": { "type": "string", "description": "The number of the order to refund" },
                "reason": {
                    "type": "string",
                    "description": "Why the user wants a refund, e.g. quality problem, no longer wanted",
                },
            },
            "required": ["orderId", "reason"],
            "additionalProperties": false,
        }))
        .tools(["queryOrder", "applyRefund"])
        .instructions(include_str!("../instructions.md"))
        .steps(run)
        .test_case(
            TestCase::new(
                "refund a delivered order",
                json!({ "orderId": "88231", "reason": "quality problem" }),
            )
            .expect_tools(["queryOrder", "applyRefund"])
            .expect_contains(["RF"]),
        )
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Input {
    order_id: String,
    reason: String,
}

fn run(input: Input) -> Result<Outcome, String> {
    let order_id = input.order_id;
    let order = match call_tool_json("queryOrder", &json!({ "orderId": order_id })) {
        Ok(order) => order,
        // The demo tools report an unknown order as `rejected` ("order 12345 not found").
        Err(e) if matches!(e.kind, ToolErrorKind::Rejected | ToolErrorKind::Failed) => {
            log::info!("queryOrder refused order {order_id}: {e}");
            return Ok(not_refunded(
                &order_id,
                format!(
                    "Order {order_id} was not found; the order number may be wrong. Please check it and try again."
                ),
            ));
        }
        Err(e) => return Err(format!("queryOrder failed: {e}")),
    };

    let product = order["product"].as_str().unwrap_or("the product");
    let status = order["status"].as_str().unwrap_or("unknown");
    if !status.eq_ignore_ascii_case("delivered") {
        return Ok(Outcome::done(json!({
            "orderId": order_id,
            "product": product,
            "status": status,
            "refunded": false,
            "message": format!(
                "Order {order_id} ({product}) is currently {}; a refund can be requested only after the order has been delivered.",
                status.replace('_', " "),
            ),
        })));
    }

    let refund = match call_tool_json(
        "applyRefund",
        &json!({ "orderId": order_id, "reason": input.reason }),
    ) {
        Ok(refund) if refund["success"] != false => refund,
        Ok(refund) => {
            let why = refund["message"].as_str().unwrap_or("no reason given");
            return Ok(not_refunded(
                &order_id,
                format!("The refund for order {order_id} ({product}) was not accepted: {why}."),
            ));
        }
        // A business refusal (or a person declining the write) is an answer for the user, not a failure.
        Err(e) if matches!(e.kind, ToolErrorKind::Rejected | ToolErrorKind::Declined) => {
            return Ok(not_refunded(
                &order_id,
                format!(
                    "The refund for order {order_id} ({product}) was not submitted: {}.",
                    e.message
                ),
            ));
        }
        Err(e) => return Err(format!("applyRefund failed: {e}")),
    };
    let refund_id = refund["refundId"].as_str().unwrap_or("(not given)");
    let arrival = refund["estimatedArrival"]
        .as_str()
        .unwrap_or("a few business days");
    Ok(Outcome::done(json!({
        "orderId": order_id,
        "product": product,
        "refunded": true,
        "refundId": refund_id,
        "estimatedArrival": arrival,
        "message": format!(
            "Refund for order {order_id} ({product}) submitted: refund id {refund_id}, expected to arrive in {arrival}."
        ),
    })))
}

/// The result when no refund was submitted; `message` says why.
fn not_refunded(order_id: &str, message: String) -> Outcome {
    Outcome::done(json!({ "orderId": order_id, "refunded": false, "message": message }))
}

skillhost_skill_sdk::export_skill!(skill);
