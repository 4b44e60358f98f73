"""skillhost's guest SDK for skills written in Python.

A skill module describes the skill once and ends by exporting it:

    from skillhost_skill import Skill, TestCase, call_tool, handover, log, read_beside

    skill = Skill(
        "checkoutQuote",                      # the function name the LLM calls
        version="0.1.0",
        description="What the cart costs with the best coupon.",
        parameters={"type": "object", "properties": {}, "additionalProperties": False},
        tools=["query_cart", "query_coupons"],  # the only tools it may call
        instructions=read_beside(__file__, "instructions.md"),
        test_cases=[TestCase("the seeded cart", {}, expect_contains=["C001"])],
    )

    @skill.steps
    def run(input):
        cart = call_tool("query_cart", {})
        return {"total": cart["total"]}      # the final result, as JSON

    WitWorld = skill.world()

componentize-py (against wit/skill@0.1.0, world `skill`) turns the module
into a component. It runs the module's top level once, at build time, so
files read there (the instructions) are part of the component; at run time
a skill has no files, network or environment.

The steps get the input as a JSON value (already checked against
`parameters` by the host) and return the final result (any JSON value),
or `handover(note)` to let the LLM-driven path finish with the skill's
instructions. An exception they raise fails the invocation with its text
(the traceback goes to the host's log), as `Err(message)` does in Rust.
"""

import json
import os
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import wit_world
from componentize_py_types import Err
from wit_world.imports import host, types

__all__ = [
    "Handover",
    "Skill",
    "TestCase",
    "ToolError",
    "call_tool",
    "handover",
    "log",
    "read_beside",
]


class ToolError(Exception):
    """Why a tool call failed: `kind` is the WIT `tool-error-kind`
    (`not-permitted`, `unknown-tool`, `invalid-arguments`, `rejected`,
    `declined`, `limit-exceeded`, `failed`), `message` the host's detail,
    naming the offending field where there is one."""

    def __init__(self, tool: str, kind: str, message: str):
        super().__init__(f"{tool} ({kind}): {message}")
        self.tool = tool
        self.kind = kind
        self.message = message


def call_tool(name: str, arguments: dict) -> Any:
    """Calls the tool `name` with `arguments` and returns its result as a
    JSON value. Only the tools the manifest declares run; every call counts
    against the invocation's tool-call budget. Raises `ToolError`."""
    try:
        result = host.call_tool(name, json.dumps(arguments))
    except Err as error:
        failure = error.value
        raise ToolError(name, _kind_name(failure.kind), failure.message) from None
    return json.loads(result)


def _kind_name(kind: types.ToolErrorKind) -> str:
    """The WIT name of a tool error's kind: `NOT_PERMITTED` is `not-permitted`."""
    return kind.name.lower().replace("_", "-")


def _logger(level: types.LogLevel) -> staticmethod:
    def write(message: str) -> None:
        host.log(level, message)

    return staticmethod(write)


class log:
    """The host's log, one line per call, under the skill's name:
    `log.info(f"order {order_id} found")`."""

    trace = _logger(types.LogLevel.TRACE)
    debug = _logger(types.LogLevel.DEBUG)
    info = _logger(types.LogLevel.INFO)
    warn = _logger(types.LogLevel.WARN)
    error = _logger(types.LogLevel.ERROR)


@dataclass(frozen=True)
class Handover:
    """Steps that cannot finish alone: the LLM-driven path continues with
    the skill's instructions and this note (what was done, what is left)."""

    note: str


def handover(note: str) -> Handover:
    return Handover(note)


@dataclass
class TestCase:
    """A regression case `skillhost test` runs on a fresh demo shop: the
    steps (or, for an instruction-only skill, the sub-agent) on `input`
    must call at least `expect_tools` and give a result containing every
    text of `expect_contains`."""

    name: str
    input: Any
    expect_tools: Sequence[str] = field(default_factory=list)
    expect_contains: Sequence[str] = field(default_factory=list)


def read_beside(module_file: str, name: str) -> str:
    """The text of the file `name` in the directory of `module_file` (a
    module's `__file__`), read at build time: `read_beside(__file__,
    "instructions.md")`."""
    with open(os.path.join(os.path.dirname(module_file), name), encoding="utf-8") as text:
        return text.read()


class Skill:
    """Everything a skill declares. `has-steps` is not set by hand: it is
    true exactly when steps are given with `@skill.steps`."""

    def __init__(
        self,
        name: str,
        *,
        version: str,
        description: str,
        parameters: Optional[dict] = None,
        tools: Sequence[str] = (),
        unlocks: Sequence[str] = (),
        instructions: str = "",
        test_cases: Sequence["TestCase"] = (),
    ):
        self.name = name
        self.version = version
        self.description = description
        # Like the Rust SDK's default: an object that takes no input.
        self.parameters = parameters or {
            "type": "object",
            "properties": {},
            "additionalProperties": False,
        }
        self.tools = list(tools)
        self.unlocks = list(unlocks)
        self.instructions = instructions
        self.test_cases = list(test_cases)
        self._steps: Optional[Callable[[Any], Any]] = None

    def steps(self, run: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """Decorates the deterministic steps: `run(input)` returns the final
        result or a `Handover`."""
        self._steps = run
        return run

    def manifest(self) -> types.Manifest:
        return types.Manifest(
            name=self.name,
            version=self.version,
            description=self.description,
            parameters=json.dumps(self.parameters),
            tools=self.tools,
            unlocks=self.unlocks,
            has_steps=self._steps is not None,
            test_cases=[
                types.TestCase(
                    name=case.name,
                    input=json.dumps(case.input),
                    expect_tools=list(case.expect_tools),
                    expect_contains=list(case.expect_contains),
                )
                for case in self.test_cases
            ],
        )

    def run(self, input: str) -> types.RunOutcome:
        if self._steps is None:
            # The manifest says has-steps = false, so the host never calls
            # this; answer anyway rather than trap.
            raise Err(f"skill {self.name} has no deterministic steps")
        try:
            outcome = self._steps(json.loads(input))
            if isinstance(outcome, Handover):
                return types.RunOutcome_Handover(outcome.note)
            return types.RunOutcome_Done(json.dumps(outcome))
        except Exception as error:
            # An uncaught exception would trap the instance, and the caller
            # would see a wasm backtrace instead of what went wrong.
            log.error("".join(traceback.format_exception(error)).rstrip())
            raise Err(f"{type(error).__name__}: {error}") from None

    def world(self) -> type:
        """The class componentize-py exports: assign it to `WitWorld` at the
        module's top level."""
        skill = self

        class WitWorld(wit_world.WitWorld):
            def manifest(self) -> types.Manifest:
                return skill.manifest()

            def instructions(self) -> str:
                return skill.instructions

            def run(self, input: str) -> types.RunOutcome:
                return skill.run(input)

        return WitWorld
