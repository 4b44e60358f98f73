"""`checkoutQuote`: what the cart costs with the best coupon the customer
can use on it, and what the coupons out of reach would need (written in
Python, against the same contract as the Rust skills)."""

from skillhost_skill import Skill, TestCase, call_tool, log, read_beside

skill = Skill(
    "checkoutQuote",
    version="0.1.0",
    description=(
        "Quotes the checkout of the customer's cart: its items and subtotal, the best coupon "
        "the customer can use on it (the largest discount whose minimum spend the cart "
        "reaches), the amount to pay with it, and how much more each other available coupon "
        "would need. Read-only: call it before placing an order to tell the customer the "
        "price, then pass the coupon to create_order."
    ),
    tools=["query_cart", "query_coupons"],
    instructions=read_beside(__file__, "instructions.md"),
    test_cases=[
        TestCase(
            "the seeded cart reaches the CNY 1000 coupon",
            {},
            expect_tools=["query_cart", "query_coupons"],
            expect_contains=["C001", "CNY 1277.00"],
        ),
    ],
)


def cents(amount: float) -> int:
    """Money as the shop's tools give it (CNY, a number) in whole cents, so
    that sums and comparisons are exact."""
    return round(amount * 100)


def money(amount_cents: int) -> float:
    return amount_cents / 100


@skill.steps
def run(_input):
    cart = call_tool("query_cart", {})
    if not cart["items"]:
        return {
            "empty": True,
            "message": "The cart is empty: add products (update_cart_item) before checking out.",
        }
    subtotal = cents(cart["total"])
    available = [
        coupon
        for coupon in call_tool("query_coupons", {})["coupons"]
        if coupon["status"] == "available"
    ]
    usable = [coupon for coupon in available if cents(coupon["min_spend"]) <= subtotal]
    # The largest discount; of equal ones, the one that expires first.
    best = min(
        usable,
        key=lambda coupon: (-cents(coupon["discount"]), coupon["expires_on"]),
        default=None,
    )
    discount = cents(best["discount"]) if best else 0
    out_of_reach = [
        {
            "coupon_id": coupon["coupon_id"],
            "title": coupon["title"],
            "spend_more": money(cents(coupon["min_spend"]) - subtotal),
        }
        for coupon in available
        if coupon not in usable
    ]
    to_pay = max(subtotal - discount, 0)
    log.info(f"cart of {cart['item_count']} item(s): best coupon {best and best['coupon_id']}")
    if best:
        message = (
            f"The cart's {cart['item_count']} item(s) come to CNY {money(subtotal):.2f}; with "
            f"coupon {best['coupon_id']} ({best['title']}) the customer pays "
            f"CNY {money(to_pay):.2f}."
        )
    else:
        message = (
            f"The cart's {cart['item_count']} item(s) come to CNY {money(subtotal):.2f}; no "
            "available coupon can be used on it."
        )
    return {
        "items": cart["items"],
        "subtotal": money(subtotal),
        "coupon": best,
        "discount": money(discount),
        "to_pay": money(to_pay),
        "coupons_out_of_reach": out_of_reach,
        "message": message,
    }


WitWorld = skill.world()
