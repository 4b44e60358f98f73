//! `order_checkout`: the manual for turning a cart into a paid order.
//! Instructions only; loading it unlocks `update_cart_item`, `create_order` and
//! `pay_order` (article 000's checkout manual). Browsing the cart and products
//! needs no manual, so `query_cart` and `search_product` stay public.

use skillhost_skill_sdk::{Skill, TestCase, json};

fn skill() -> Skill {
    Skill::new("order_checkout")
        .description(
            "Checkout manual: the procedure for changing the cart, placing an order and paying \
             for it. Load it before changing the cart, ordering or paying; those tools appear \
             only once it is loaded.",
        )
        .parameters(json!({
            "type": "object",
            "properties": {
                "request": { "type": "string", "description": "What the user wants to buy or change, in their words" },
            },
            "required": ["request"],
            "additionalProperties": false,
        }))
        .tools(["query_cart", "search_product", "update_cart_item", "create_order", "pay_order"])
        .unlocks(["update_cart_item", "create_order", "pay_order"])
        .instructions(include_str!("../instructions.md"))
        .test_case(
            TestCase::new("review the cart before ordering", json!({ "request": "I want to check out my cart" }))
                .expect_tools(["query_cart"]),
        )
}

skillhost_skill_sdk::export_skill!(skill);
