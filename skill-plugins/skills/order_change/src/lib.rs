//! `order_change`: the manual for cancelling an order or changing its address.
//! Instructions only; loading it unlocks `cancel_order` and `change_address`
//! (article 000's order change manual).

use skillhost_skill_sdk::{Skill, TestCase, json};

fn skill() -> Skill {
    Skill::new("order_change")
        .description(
            "Order change manual: the procedure for cancelling an order or changing its delivery \
             address. Load it before cancelling an order or changing an address; the cancel and \
             change-address tools appear only once it is loaded.",
        )
        .parameters(json!({
            "type": "object",
            "properties": {
                "request": { "type": "string", "description": "What the user wants changed, in their words" },
                "orderId": { "type": "string", "description": "The order concerned, if the user named one" },
            },
            "required": ["request"],
            "additionalProperties": false,
        }))
        .tools(["query_order", "cancel_order", "change_address"])
        .unlocks(["cancel_order", "change_address"])
        .instructions(include_str!("../instructions.md"))
        .test_case(
            TestCase::new(
                "a delivered order cannot be cancelled",
                json!({ "request": "Please cancel my order 88231", "orderId": "88231" }),
            )
            .expect_tools(["query_order"])
            .expect_contains(["88231"]),
        )
}

skillhost_skill_sdk::export_skill!(skill);
