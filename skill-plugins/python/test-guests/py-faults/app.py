"""`pyFaults`: a Python guest that goes wrong in the way its input asks,
for the tests of the Python SDK and of the sandbox around an interpreter."""

import json
import os
import time

from skillhost_skill import Skill, ToolError, call_tool, handover, log

skill = Skill(
    "pyFaults",
    version="0.1.0",
    description=(
        "Goes wrong as asked: raises, calls an undeclared tool, loops, hoards memory; or "
        "refunds with a reason made of random bytes and the time."
    ),
    parameters={
        "type": "object",
        "properties": {"fault": {"type": "string"}, "orderId": {"type": "string"}},
        "required": ["fault"],
    },
    tools=["queryOrder", "applyRefund"],
)


@skill.steps
def run(input):
    fault = input["fault"]
    if fault == "raise":
        raise ValueError("the steps gave up")
    if fault == "undeclared":
        # Not caught: the ToolError ends the run.
        return call_tool("cancel_order", {"order_id": "88239"})
    if fault == "caught":
        try:
            call_tool("queryOrder", {"orderId": input["orderId"]})
        except ToolError as error:
            return {"tool": error.tool, "kind": error.kind, "message": error.message}
        return {"found": True}
    if fault == "refund":
        # What differs on every run, unless the host hands the steps run
        # again after an approval what it handed the first attempt.
        reason = f"request {os.urandom(8).hex()} at {time.time()}"
        refund = call_tool("applyRefund", {"orderId": input["orderId"], "reason": reason})
        return {"refund": refund, "reason": reason}
    if fault == "unserializable":
        return {"ids": {1, 2}}
    if fault == "handover":
        return handover("the customer must choose")
    if fault == "print":
        print("printed to stdout")
        log.warn("logged at warn")
        return {"printed": True}
    if fault == "loop":
        while True:
            pass
    if fault == "hoard":
        hoard = []
        while True:
            hoard.append(bytearray(1 << 20))
    raise ValueError(f"no fault named {fault!r}")


class WitWorld(skill.world()):
    def run(self, input):
        # What a guest written without the SDK does: its exception is not
        # caught, and componentize-py prints it to stderr and traps.
        if json.loads(input)["fault"] == "uncaught":
            raise LookupError("nothing caught this")
        return super().run(input)
