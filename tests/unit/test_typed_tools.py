"""``@tool``: the schema pydantic builds from a typed function, and the model's arguments checked
against it (a tool error the model reads, never an exception in the loop)."""

from __future__ import annotations

from typing import Literal

import pydantic
import pytest

from nrllm_agents import CallContext, FunctionTool, ToolError, tool
from nrllm_agents.domain.loop import ToolLoop
from nrllm_agents.domain.providers import ScriptedProvider
from nrllm_agents.domain.steps import LoopOutcome, StepKind

from .test_loop import Recorder


class Address(pydantic.BaseModel):
    street: str
    number: int = 1


class Person(pydantic.BaseModel):
    name: str
    address: Address


@tool
def everything(
    count: int,
    ratio: float,
    loud: bool,
    label: str,
    mode: Literal["fast", "slow"],
    people: list[Person],
    note: str | None = None,
    tags: list[str] | None = None,
    retries: int = 3,
) -> dict:
    """Use every kind of parameter.

    A second paragraph that is not part of the description.

    Args:
        count: how many times
        ratio: a share between
            zero and one
        mode: which speed
    """
    return {"count": count, "people": people, "retries": retries, "note": note}


def test_the_schema_of_every_kind_of_parameter() -> None:
    assert isinstance(everything, FunctionTool)
    assert everything.name == "everything"
    assert everything.description == "Use every kind of parameter."
    schema = everything.parameters
    props = schema["properties"]
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert schema["required"] == ["count", "ratio", "loud", "label", "mode", "people"]
    assert props["count"] == {"type": "integer", "description": "how many times"}
    assert props["ratio"] == {"type": "number", "description": "a share between zero and one"}
    assert props["loud"] == {"type": "boolean"}
    assert props["label"] == {"type": "string"}
    assert props["mode"] == {"type": "string", "enum": ["fast", "slow"], "description": "which speed"}
    assert props["note"] == {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}
    assert props["tags"]["anyOf"][0] == {"type": "array", "items": {"type": "string"}}
    assert props["retries"] == {"type": "integer", "default": 3}
    assert props["people"] == {"type": "array", "items": {"$ref": "#/$defs/Person"}}
    assert schema["$defs"]["Person"]["properties"]["address"] == {"$ref": "#/$defs/Address"}
    assert schema["$defs"]["Address"] == {
        "type": "object",
        "properties": {"street": {"type": "string"}, "number": {"type": "integer", "default": 1}},
        "required": ["street"],
    }
    assert not _titles(schema)  # pydantic's titles are noise in every prompt


def _titles(node: object, *, properties: bool = False) -> list[str]:
    if isinstance(node, dict):
        own = [] if properties else [k for k in node if k == "title"]
        return own + [t for k, v in node.items() for t in _titles(v, properties=k == "properties")]
    if isinstance(node, list):
        return [t for item in node for t in _titles(item)]
    return []


def test_valid_arguments_call_the_function_with_typed_values_and_defaults() -> None:
    result = everything.execute(
        {
            "count": 2,
            "ratio": 0.5,
            "loud": False,
            "label": "x",
            "mode": "fast",
            "people": [{"name": "Ada", "address": {"street": "Main"}}],
        }
    )
    # nested models arrive as models, and a returned model is JSON again
    assert result == {
        "count": 2,
        "people": [{"name": "Ada", "address": {"street": "Main", "number": 1}}],
        "retries": 3,
        "note": None,
    }
    assert everything(1, 0.1, True, "l", "slow", [])["count"] == 1  # still callable as a function


@pytest.mark.parametrize(
    "arguments, named",
    [
        ({}, "count: Field required"),
        ({"count": "many"}, "count: Input should be a valid integer"),
        ({"mode": "medium"}, "mode: Input should be 'fast' or 'slow'"),
        ({"people": [{"name": "Ada", "address": {}}]}, "people.0.address.street: Field required"),
        ({"surprise": 1}, "surprise: Extra inputs are not permitted"),
        ({"_raw": "not json"}, "_raw: Extra inputs are not permitted"),
    ],
)
def test_invalid_arguments_are_a_tool_error_naming_each_field(arguments: dict, named: str) -> None:
    with pytest.raises(ToolError, match="invalid arguments for everything") as raised:
        everything.execute(arguments)
    assert named in str(raised.value)


def test_invalid_arguments_go_back_to_the_model_and_the_run_goes_on() -> None:
    calls: list[int] = []

    @tool
    def double(n: int) -> int:
        """Double a number."""
        calls.append(n)
        return 2 * n

    script = [
        {"tool_calls": [{"name": "double", "arguments": {"n": "ten"}}]},
        {"tool_calls": [{"name": "double", "arguments": {"n": 10}}]},
        {"content": "20"},
    ]
    trace = Recorder()
    result = ToolLoop(ScriptedProvider(script), {"double": double}, trace=trace).start("double ten")
    assert result.outcome == LoopOutcome.COMPLETED and result.final_text == "20"
    tools = [s for s in trace.steps if s.kind == StepKind.TOOL]
    assert "invalid arguments for double" in str(tools[0].payload) and calls == [10]
    assert "20" in str(tools[1].payload)


def test_options_and_the_call_context() -> None:
    seen: list[object] = []

    @tool(name="ship", requires_approval=True, idempotent=False, instant=True, description="Ship it.")
    def ship_order(order: int, context: CallContext | None = None) -> str:
        """Not this."""
        seen.append(context)
        return "shipped"

    assert (ship_order.name, ship_order.description) == ("ship", "Ship it.")
    assert (ship_order.requires_approval, ship_order.idempotent, ship_order.instant) == (True, False, True)
    assert "context" not in ship_order.parameters["properties"]
    marker = object()
    assert ship_order.execute({"order": 1}, context=marker) == "shipped" and seen == [marker]
    with pytest.raises(ToolError, match="context: Extra inputs"):
        ship_order.execute({"order": 1, "context": "from the model"})


def test_a_function_that_cannot_be_described_is_refused_at_decoration() -> None:
    with pytest.raises(TypeError, match="needs a type hint"):

        @tool
        def untyped(x):  # type: ignore[no-untyped-def]
            return x

    with pytest.raises(TypeError, match=r"\*rest"):

        @tool
        def variadic(*rest: int) -> None:
            return None
