"""A tool call's idempotency key survives what repeats the call: a hand-back that cut the call
short, and a worker lost after the call's effect (the reaper requeues the run). The next
segment continues from the stream and executes the call again with the same key."""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

import pytest

from nrllm_agents import CallContext, store
from nrllm_agents.domain import StepInterrupted
from nrllm_agents.domain.idempotency import idempotency_key
from nrllm_agents.executors import dispatch
from nrllm_agents.models import AgentRun, RunStatus
from nrllm_agents.runtime import segment
from nrllm_agents.runtime.agent_runtime import Outcome
from tests.integration.runs import expire, kinds

pytestmark = pytest.mark.django_db

ONE_CALL = [{"tool_calls": [{"name": "keyed", "arguments": {"amount": 5}}]}, {"content": "paid"}]


class KeyedTool:
    """Notes the key of each execution; ``hand_back_first``: the first execution is cut short by
    its worker's shutdown (``hand_back_all``, as the worker's SIGTERM handler does) while it waits."""

    name = "keyed"
    description = "pay an amount, keyed"
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {"amount": {"type": "integer"}}}
    requires_approval = False
    keys: ClassVar[list[str | None]] = []
    hand_back_first = False

    def __init__(self, run_id: uuid.UUID | None = None) -> None:
        self.run_id = run_id

    def execute(self, arguments: dict[str, Any], context: CallContext | None = None) -> Any:
        assert context is not None
        KeyedTool.keys.append(context.idempotency_key)
        if KeyedTool.hand_back_first and len(KeyedTool.keys) == 1:
            segment.hand_back_all()
            if context.token.wait(10):
                raise StepInterrupted()
        return {"paid": arguments["amount"]}


@pytest.fixture
def keyed(settings):
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "TOOLS": {"keyed": f"{__name__}.KeyedTool"}}
    KeyedTool.keys, KeyedTool.hand_back_first = [], False
    yield KeyedTool
    segment.shutdown_requested.clear()  # hand_back_all sets this process-wide flag


@pytest.fixture
def dispatched(monkeypatch):
    """The jobs sent to the executor; none runs: the test is the worker."""
    sent: list[uuid.UUID] = []
    monkeypatch.setattr(dispatch, "dispatch", lambda run_id, **kwargs: sent.append(run_id))
    return sent


def test_a_call_cut_short_by_a_hand_back_is_repeated_with_the_same_key(runtime, keyed, dispatched):
    keyed.hand_back_first = True
    run_id = runtime.enqueue({"prompt": "pay", "tools": ["keyed"], "script": ONE_CALL})
    handed = runtime.run_queued(run_id)
    assert handed.outcome == Outcome.REQUEUED and dispatched[-1] == run_id
    assert kinds(run_id) == ["request", "llm"]  # the cut-short call is not recorded
    segment.shutdown_requested.clear()  # the next worker

    done = runtime.run_queued(run_id)
    assert done.outcome == Outcome.COMPLETED and done.final_text == "paid"
    assert keyed.keys == [idempotency_key(run_id, 1, "call_1_1")] * 2
    assert kinds(run_id) == ["request", "llm", "tool", "request", "llm"]


def test_a_call_whose_worker_was_lost_after_the_effect_is_repeated_with_the_same_key(runtime, keyed, dispatched):
    run_id = runtime.enqueue({"prompt": "pay", "tools": ["keyed"], "script": ONE_CALL})

    def killed_before_the_tool_step_is_recorded(step):
        if step["kind"] == "tool":
            raise SystemExit("worker killed")  # not an Exception: nothing in the runtime handles it

    with pytest.raises(SystemExit):
        runtime.run_queued(run_id, on_step=killed_before_the_tool_step_is_recorded)
    assert kinds(run_id) == ["request", "llm"] and len(keyed.keys) == 1
    expire(run_id)
    assert store.reap().requeued == [run_id]
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.QUEUED

    done = runtime.run_queued(run_id)
    assert done.outcome == Outcome.COMPLETED
    assert keyed.keys == [idempotency_key(run_id, 1, "call_1_1")] * 2
    assert kinds(run_id) == ["request", "llm", "tool", "request", "llm"]
