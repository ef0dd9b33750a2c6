"""Each tool call's idempotency key: the same for every execution of one call (a continuation
rebuilt from the stream included), different for every other call, given to typed tools that ask."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from nrllm_agents import CallContext, ToolError, tool
from nrllm_agents.domain import LoopOutcome, StepKind, ToolLoop, rebuild_state
from nrllm_agents.domain.idempotency import idempotency_key
from nrllm_agents.domain.providers import ScriptedProvider

from .test_loop import Recorder

RUN = uuid.UUID("0b7e5c1e-8f3a-4c2d-9e61-3a5d7c9b1f20")


class WorkerLost(BaseException):
    """The process died right after a tool's effect, before its step was recorded."""


class KeyedTool:
    """Records the key each execution receives; its context also tells a model call's (none)."""

    name = "charge"
    description = "charge a card"
    parameters: dict[str, Any] = {"type": "object", "properties": {}}
    requires_approval = False

    def __init__(self) -> None:
        self.keys: list[str | None] = []

    def execute(self, arguments: dict[str, Any], context: CallContext | None = None) -> Any:
        self.keys.append(context.idempotency_key if context is not None else None)
        return "charged"


class KeyWatchingProvider(ScriptedProvider):
    """A scripted model that notes the key of the context each model call receives."""

    seen: list[str | None]

    def complete(self, messages: Any, tools: Any, context: CallContext | None = None) -> Any:
        self.seen = [*getattr(self, "seen", []), context.idempotency_key if context else "no context"]
        return super().complete(messages, tools, context)


def test_a_key_is_a_uuid_made_only_of_the_run_the_round_and_the_call_id():
    key = idempotency_key(RUN, 1, "call_1")
    assert uuid.UUID(key).version == 5 and str(uuid.UUID(key)) == key
    assert idempotency_key(str(RUN), 1, "call_1") == key == idempotency_key(str(RUN).upper(), 1, "call_1")
    others = {
        idempotency_key(uuid.uuid4(), 1, "call_1"),
        idempotency_key(RUN, 2, "call_1"),  # a server that numbers its call ids per answer
        idempotency_key(RUN, 1, "call_2"),
    }
    assert len(others) == 3 and key not in others
    # Fixed for good: a release that changed it would repeat effects of runs in flight.
    assert key == "caa5561b-2893-5327-900c-b4d2541a8c23"
    with pytest.raises(ValueError):
        idempotency_key("not a run", 1, "call_1")


def test_every_tool_call_of_a_run_gets_its_key_and_a_model_call_none():
    charge = KeyedTool()
    provider = KeyWatchingProvider(
        [
            {"tool_calls": [{"id": "call_1", "name": "charge"}, {"id": "call_2", "name": "charge"}]},
            {"tool_calls": [{"id": "call_1", "name": "charge"}]},  # the same id again, next turn
            {"content": "done"},
        ]
    )
    result = ToolLoop(provider, {"charge": charge}, trace=Recorder(), run_id=str(RUN)).start("go")
    assert result.outcome == LoopOutcome.COMPLETED
    assert charge.keys == [
        idempotency_key(RUN, 1, "call_1"),
        idempotency_key(RUN, 1, "call_2"),
        idempotency_key(RUN, 2, "call_1"),
    ]
    assert len(set(charge.keys)) == 3 and provider.seen == [None, None, None]


def test_a_loop_outside_a_run_gives_no_key():
    charge = KeyedTool()
    script = [{"tool_calls": [{"name": "charge"}]}, {"content": "ok"}]
    ToolLoop(ScriptedProvider(script), {"charge": charge}, trace=Recorder()).start("go")
    assert charge.keys == [None]


def test_a_call_repeated_by_the_continuation_of_a_lost_segment_carries_the_same_key():
    """The first segment dies after the effect, before the tool step is recorded; the next one
    rebuilds its state from the recorded steps and executes the same call again, same key."""
    script = [
        {"tool_calls": [{"name": "charge"}]},
        {"tool_calls": [{"name": "charge"}, {"name": "charge"}]},
        {"content": "done"},
    ]
    charge = KeyedTool()
    recorded: list[dict[str, Any]] = []

    def dies_at_the_third_tool(step):
        if step.kind == StepKind.TOOL and sum(1 for s in recorded if s["kind"] == "tool") == 2:
            raise WorkerLost()
        recorded.append({"kind": step.kind.value, "round": step.round, "payload": step.payload})

    first = ToolLoop(ScriptedProvider(script), {"charge": charge}, trace=dies_at_the_third_tool, run_id=str(RUN))
    with pytest.raises(WorkerLost):
        first.start("go")
    assert len(charge.keys) == 3  # the third call's effect happened; its step was never recorded

    again = KeyedTool()
    state = rebuild_state(recorded)
    assert [c.id for c in state.pending_calls] == ["call_2_2"]
    result = ToolLoop(ScriptedProvider(script), {"charge": again}, trace=Recorder(), run_id=str(RUN)).proceed(state)
    assert result.outcome == LoopOutcome.COMPLETED
    assert again.keys == [charge.keys[2]] == [idempotency_key(RUN, 2, "call_2_2")]


def test_a_typed_tool_takes_the_key_like_context_and_the_model_cannot_set_it():
    seen: list[str | None] = []

    @tool
    def pay(amount: int, idempotency_key: str | None) -> str:
        """Pay an amount."""
        seen.append(idempotency_key)
        return "paid"

    assert "idempotency_key" not in pay.parameters["properties"] and pay.parameters["required"] == ["amount"]
    assert pay.execute({"amount": 3}, context=CallContext(idempotency_key="k-1")) == "paid"
    assert pay.execute({"amount": 3}) == "paid"  # called outside a run: no key
    assert seen == ["k-1", None]
    with pytest.raises(ToolError, match="idempotency_key: Extra inputs"):
        pay.execute({"amount": 3, "idempotency_key": "from the model"}, context=CallContext(idempotency_key="k-2"))

    result = ToolLoop(
        ScriptedProvider([{"tool_calls": [{"name": "pay", "arguments": {"amount": 5}}]}, {"content": "ok"}]),
        {"pay": pay},
        trace=Recorder(),
        run_id=str(RUN),
    ).start("go")
    assert result.outcome == LoopOutcome.COMPLETED and seen[-1] == idempotency_key(RUN, 1, "call_1_1")
