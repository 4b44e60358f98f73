//! `after_sale_apply`: the manual for returns, exchanges and repairs.
//! Instructions only; loading it unlocks `apply_after_sale` (article 000's
//! after-sales manual). `query_after_sale` stays public: checking progress
//! needs no manual.

use skillhost_skill_sdk::{Skill, TestCase, json};

fn skill() -> Skill {
    Skill::new("after_sale_apply")
        .description(
            "After-sales manual: the procedure for applying for a return, exchange or repair of a \
             delivered order. Load it before applying; the apply tool appears only once it is \
             loaded. Not needed just to check the progress of an existing request.",
        )
        .parameters(json!({
            "type": "object",
            "properties": {
                "request": { "type": "string", "description": "What the user wants, in their words" },
                "orderId": { "type": "string", "description": "The order concerned, if the user named one" },
            },
            "required": ["request"],
            "additionalProperties": false,
        }))
        .tools(["query_order", "apply_after_sale", "query_after_sale"])
        .unlocks(["apply_after_sale"])
        .instructions(include_str!("../instructions.md"))
        .test_case(
            TestCase::new(
                "return a delivered robot vacuum",
                json!({ "request": "The robot vacuum from order 88231 stopped picking up dust, I want to return it", "orderId": "88231" }),
            )
            .expect_tools(["query_order"])
            .expect_contains(["88231"]),
        )
}

skillhost_skill_sdk::export_skill!(skill);
