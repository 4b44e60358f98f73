//! `processRefund`: checks the order, and submits a refund only when it has been
//! delivered (article 003's refund skill, as deterministic steps).

use serde::{Deserialize, Serialize};
use skillhost_skill_sdk::{Outcome, Skill, TestCase, ToolErrorKind, call_tool, json, log};

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

// Typed tool arguments and results: only the fields the steps use are read.

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct QueryOrder<'a> {
    order_id: &'a str,
}

#[derive(Deserialize)]
struct Order {
    product: Option<String>,
    status: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ApplyRefund<'a> {
    order_id: &'a str,
    reason: &'a str,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Refund {
    /// Absent means accepted; only an explicit `false` is a refusal.
    success: Option<bool>,
    message: Option<String>,
    refund_id: Option<String>,
    estimated_arrival: Option<String>,
}

/// The skill's result. `refunded` says whether a refund was submitted;
/// `message` says what happened in a sentence for the user.
#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct RefundResult<'a> {
    order_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    product: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'a str>,
    refunded: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    refund_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    estimated_arrival: Option<&'a str>,
    message: String,
}

fn run(input: Input) -> Result<Outcome, String> {
    let order_id = input.order_id.as_str();
    let order = match call_tool::<_, Order>("queryOrder", &QueryOrder { order_id }) {
        Ok(order) => order,
        // The demo tools report an unknown order as `rejected` ("order 12345 not found").
        Err(e) if matches!(e.kind, ToolErrorKind::Rejected | ToolErrorKind::Failed) => {
            log::info!("queryOrder refused order {order_id}: {e}");
            return Ok(not_refunded(
                order_id,
                format!(
                    "Order {order_id} was not found; the order number may be wrong. Please check it and try again."
                ),
            ));
        }
        Err(e) => return Err(format!("queryOrder failed: {e}")),
    };

    let product = order.product.as_deref().unwrap_or("the product");
    let status = order.status.as_deref().unwrap_or("unknown");
    if !status.eq_ignore_ascii_case("delivered") {
        return Ok(Outcome::done(RefundResult {
            order_id,
            product: Some(product),
            status: Some(status),
            message: format!(
                "Order {order_id} ({product}) is currently {}; a refund can be requested only after the order has been delivered.",
                status.replace('_', " "),
            ),
            ..RefundResult::default()
        }));
    }

    let request = ApplyRefund {
        order_id,
        reason: &input.reason,
    };
    let refund = match call_tool::<_, Refund>("applyRefund", &request) {
        Ok(refund) if refund.success != Some(false) => refund,
        Ok(refund) => {
            let why = refund.message.as_deref().unwrap_or("no reason given");
            return Ok(not_refunded(
                order_id,
                format!("The refund for order {order_id} ({product}) was not accepted: {why}."),
            ));
        }
        // A business refusal (or a person declining the write) is an answer for the user, not a failure.
        Err(e) if matches!(e.kind, ToolErrorKind::Rejected | ToolErrorKind::Declined) => {
            return Ok(not_refunded(
                order_id,
                format!(
                    "The refund for order {order_id} ({product}) was not submitted: {}.",
                    e.message
                ),
            ));
        }
        Err(e) => return Err(format!("applyRefund failed: {e}")),
    };
    let refund_id = refund.refund_id.as_deref().unwrap_or("(not given)");
    let arrival = refund
        .estimated_arrival
        .as_deref()
        .unwrap_or("a few business days");
    Ok(Outcome::done(RefundResult {
        order_id,
        product: Some(product),
        refunded: true,
        refund_id: Some(refund_id),
        estimated_arrival: Some(arrival),
        message: format!(
            "Refund for order {order_id} ({product}) submitted: refund id {refund_id}, expected to arrive in {arrival}."
        ),
        ..RefundResult::default()
    }))
}

/// The result when no refund was submitted; `message` says why.
fn not_refunded(order_id: &str, message: String) -> Outcome {
    Outcome::done(RefundResult {
        order_id,
        message,
        ..RefundResult::default()
    })
}

skillhost_skill_sdk::export_skill!(skill, steps: run);
