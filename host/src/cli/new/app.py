"""`{{name}}`: replace this with what the skill does."""

from skillhost_skill import Skill, TestCase, ToolError, call_tool, log, read_beside

skill = Skill(
    "{{name}}",  # the function name the LLM calls
    version="0.1.0",
    # The LLM reads this to decide whether to call the skill: say what it
    # does and when to use it.
    description="Looks up an order of the shop and says its status.",
    parameters={
        "type": "object",
        "properties": {"orderId": {"type": "string", "description": "The order number"}},
        "required": ["orderId"],
        "additionalProperties": False,
    },
    tools=["queryOrder"],  # the only tools it may call
    instructions=read_beside(__file__, "instructions.md"),  # read at build time
    test_cases=[
        TestCase(
            "a delivered order",
            {"orderId": "88231"},
            expect_tools=["queryOrder"],
            expect_contains=["delivered"],
        ),
    ],
)


@skill.steps
def run(input):
    order_id = input["orderId"]
    try:
        order = call_tool("queryOrder", {"orderId": order_id})
    except ToolError as error:
        if error.kind == "rejected":  # the shop does not know the order
            return {"found": False, "message": f"Order {order_id} was not found."}
        raise
    log.info(f"order {order_id} is {order['status']}")
    return {"found": True, "status": order["status"], "message": f"Order {order_id} is {order['status']}."}


WitWorld = skill.world()
