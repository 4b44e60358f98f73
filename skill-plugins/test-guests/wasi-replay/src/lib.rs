//! Makes a refund whose reason carries a token from WASI's random source
//! and the wall clock's time, as a skill sending an idempotency key or a
//! timestamp would: when the write waits for approval and the steps run
//! again, they must read the same token and time, or their call would no
//! longer be the one approved.

use serde::Deserialize;
use skillhost_skill_sdk::{Outcome, Skill, Value, call_tool_json, json};

mod bindings {
    wit_bindgen::generate!({ path: "../wasi-wit", world: "replay", generate_all });
}

use bindings::wasi::clocks::{monotonic_clock, wall_clock};
use bindings::wasi::random::{insecure, random};

fn skill() -> Skill {
    Skill::new("wasiReplay")
        .description("Test guest: a refund whose reason carries WASI random bytes and the time.")
        .instructions("Test guest; never loaded by a real host.")
        .parameters(json!({
            "type": "object",
            "properties": { "orderId": { "type": "string" } },
            "required": ["orderId"],
        }))
        .tools(["queryOrder", "applyRefund"])
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Input {
    order_id: String,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn run(input: Input) -> Result<Outcome, String> {
    let token = hex(&random::get_random_bytes(16));
    let insecure_token = hex(&insecure::get_insecure_random_bytes(8));
    let started = monotonic_clock::now();
    let order = call_tool_json("queryOrder", &json!({ "orderId": input.order_id }))
        .map_err(|e| e.to_string())?;
    let time = wall_clock::now();
    let reason = format!("request {token} at {}.{:09}", time.seconds, time.nanoseconds);
    let refund = call_tool_json(
        "applyRefund",
        &json!({ "orderId": input.order_id, "reason": reason }),
    );
    let (refund, refund_error): (Value, Option<String>) = match refund {
        Ok(refund) => (refund, None),
        Err(error) => (Value::Null, Some(error.to_string())),
    };
    Ok(Outcome::done(json!({
        "status": order["status"],
        "reason": reason,
        "insecureToken": insecure_token,
        "monotonicElapsedNanos": monotonic_clock::now().saturating_sub(started),
        "refund": refund,
        "refundError": refund_error,
    })))
}

skillhost_skill_sdk::export_skill!(skill, steps: run);
