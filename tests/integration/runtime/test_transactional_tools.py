"""Transactional tools (issue 47): a tool whose effect is ORM writes runs inside the transaction
that records its ``tool`` step, so its writes and its step commit together through the step's
fence, or neither does.

- a call that returns: its rows and its step, once;
- a call that fails (``ToolError`` or a crash): its rows rolled back, the error recorded;
- a worker lost before the commit (its connection killed): no rows, no step; the next segment
  makes the call again, and it is made once in all;
- a cancel that interrupts the call, or that the step's fence meets at the commit: the rows
  rolled back, the step recorded interrupted with ``rolled_back: true``, the run ``cancelled``
  with its usual audit;
- the race of a cancel against the commit, many rounds: rows and a result step, or neither rows
  nor result; never rows without their step.

The kill points are hooks in the test's tool, never sleeps. The cancel tests need a second
connection writing while the tool's transaction is open: PostgreSQL (SQLite has one writer: a
cancel there waits for the tool's transaction, see docs/howto/tools.md).
"""

from __future__ import annotations

import threading
import uuid
from typing import Any, ClassVar

import pytest

from nrllm_agents import CallContext
from nrllm_agents.domain import StepInterrupted, ToolError
from nrllm_agents.models import AgentRun, AgentRunEvent, CancelSource, Note, RunStatus
from nrllm_agents.runtime.agent_runtime import Outcome
from tests.conftest import race_rounds
from tests.integration.runs import kinds
from tests.integration.runtime.test_claim_faults import terminate_own_backend

pytestmark = pytest.mark.django_db(transaction=True)
ROUNDS = race_rounds(100)


class Ledger:
    """Writes a ``Note`` per call, then does what ``then`` says: return, fail, wait for a cancel
    (``wait``), let the test cancel and return anyway (``cancel_then_return``), or lose its
    worker's connection (``lose_connection``, the first call only)."""

    name = "ledger"
    description = "enter a line in the ledger"
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {"title": {"type": "string"}}}
    requires_approval = False
    transactional = True
    then: ClassVar[str] = "return"
    calls: ClassVar[int] = 0
    written: ClassVar[threading.Event] = threading.Event()
    release: ClassVar[threading.Event] = threading.Event()

    def __init__(self, run_id: uuid.UUID | None = None) -> None:
        self.run_id = run_id

    def execute(self, arguments: dict[str, Any], context: CallContext | None = None) -> Any:
        assert context is not None
        Ledger.calls += 1
        Note.objects.create(run_id=self.run_id, title=arguments.get("title", "line"), body="")
        Ledger.written.set()
        if Ledger.then == "tool_error":
            raise ToolError("the ledger is closed")
        if Ledger.then == "crash":
            raise RuntimeError("the ledger broke")
        if Ledger.then == "wait":
            if context.token.wait(30):
                raise StepInterrupted(details={"entered": 1})
        if Ledger.then == "cancel_then_return":
            assert Ledger.release.wait(30)  # the test's cancel has committed; the call ignores it
        if Ledger.then == "lose_connection" and Ledger.calls == 1:
            terminate_own_backend()  # the worker's connection dies before the commit
        return {"entered": arguments.get("title", "line")}


@pytest.fixture
def ledger(settings):
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "TOOLS": {"ledger": f"{__name__}.Ledger"}}
    Ledger.then, Ledger.calls = "return", 0
    Ledger.written, Ledger.release = threading.Event(), threading.Event()
    return Ledger


def request(**extra: Any) -> dict[str, Any]:
    call = {"tool_calls": [{"name": "ledger", "arguments": {"title": "order #42"}}]}
    return {"prompt": "enter it", "tools": ["ledger"], "script": [call, {"content": "entered"}], **extra}


def tool_step(run_id: uuid.UUID) -> dict[str, Any]:
    (payload,) = AgentRunEvent.objects.filter(run_id=run_id, kind="tool").values_list("payload", flat=True)
    return payload


def test_its_writes_commit_with_its_step(runtime, ledger):
    result = runtime.run(request())
    assert result.outcome == Outcome.COMPLETED, result
    assert list(Note.objects.filter(run_id=result.run_id).values_list("title", flat=True)) == ["order #42"]
    step = tool_step(result.run_id)
    assert step["result"] == {"entered": "order #42"} and "rolled_back" not in step


@pytest.mark.parametrize("then", ["tool_error", "crash"])
def test_a_call_that_fails_leaves_no_write_and_records_its_error(runtime, ledger, then):
    ledger.then = then
    result = runtime.run(request())
    assert not Note.objects.filter(run_id=result.run_id).exists()
    step = tool_step(result.run_id)
    assert step["rolled_back"] is True and step["result"] is None and step["error"]
    if then == "tool_error":  # the model is told and goes on
        assert result.outcome == Outcome.COMPLETED and "the ledger is closed" in step["error"]
    else:
        assert result.outcome == Outcome.FAILED and result.termination_reason == "tool_failed"


@pytest.mark.postgres_only
def test_a_worker_lost_before_the_commit_leaves_nothing_and_the_next_segment_makes_the_call_once(
    runtime, ledger, monkeypatch
):
    from nrllm_agents.executors import dispatch

    monkeypatch.setattr(dispatch, "dispatch", lambda run_id, **kwargs: None)  # the test is the worker
    ledger.then = "lose_connection"
    run_id = runtime.enqueue(request())
    lost = runtime.run_queued(run_id)
    assert lost is not None and lost.outcome == Outcome.REQUEUED, lost
    assert not Note.objects.filter(run_id=run_id).exists()
    assert kinds(run_id) == ["request", "llm"]  # no tool step: it was never committed
    done = runtime.run_queued(run_id)
    assert done is not None and done.outcome == Outcome.COMPLETED, done
    assert Ledger.calls == 2 and Note.objects.filter(run_id=run_id).count() == 1  # made again, once in all
    assert kinds(run_id) == ["request", "llm", "tool", "request", "llm"]


def cancel_when_written(runtime, run_ids: list[uuid.UUID], then: threading.Event | None = None) -> threading.Thread:
    """A thread that cancels the run once the tool has written (on its own connection)."""

    def cancel() -> None:
        from django.db import connection

        try:
            assert Ledger.written.wait(30)
            run_id = AgentRun.objects.filter(prompt="enter it").order_by("-created_at").values_list("pk", flat=True)[0]
            run_ids.append(run_id)
            runtime.cancel(run_id, source=CancelSource.API, reason="stop the ledger")
            if then is not None:
                then.set()
        finally:
            connection.close()

    thread = threading.Thread(target=cancel)
    thread.start()
    return thread


@pytest.mark.postgres_only
@pytest.mark.parametrize("then", ["wait", "cancel_then_return"])
def test_a_cancel_rolls_the_calls_writes_back_and_the_step_says_so(runtime, ledger, then):
    """``wait``: the cancel interrupts the call; ``cancel_then_return``: the call ignores it and
    returns, and the step's fence meets the cancel at the commit."""
    ledger.then = then
    run_ids: list[uuid.UUID] = []
    canceller = cancel_when_written(runtime, run_ids, then=ledger.release)
    result = runtime.run(request())
    canceller.join(30)
    assert result.outcome == Outcome.CANCELLED, result
    assert not Note.objects.filter(run_id=result.run_id).exists()
    step = tool_step(result.run_id)
    assert (step["interrupted"], step["rolled_back"], step["result"]) == (True, True, None), step
    if then == "wait":
        assert step["entered"] == 1  # what the call had seen, kept
    run = AgentRun.objects.get(pk=result.run_id)
    assert (run.status, run.cancel_reason, run.cancel_source) == (RunStatus.CANCELLED, "stop the ledger", "api")
    assert kinds(result.run_id) == ["request", "llm", "tool", "cancelled"]
    cancelled = AgentRunEvent.objects.get(run_id=result.run_id, kind="cancelled").payload
    assert cancelled["interrupted_sequence"] == 2, cancelled  # the rolled-back call, as for any interrupted step


@pytest.mark.postgres_only
def test_a_cancel_racing_the_commit_leaves_rows_with_their_step_or_neither(runtime, ledger):
    outcomes = {"committed": 0, "rolled back": 0}
    for _ in range(ROUNDS):
        Ledger.written = threading.Event()
        run_ids: list[uuid.UUID] = []
        canceller = cancel_when_written(runtime, run_ids)
        result = runtime.run(request())
        canceller.join(30)
        notes = Note.objects.filter(run_id=result.run_id).count()
        step = tool_step(result.run_id)
        if step.get("interrupted"):
            assert (notes, step["rolled_back"], step["result"]) == (0, True, None), step
            assert result.outcome == Outcome.CANCELLED
            outcomes["rolled back"] += 1
        else:  # committed first: the rows and their step, then the cancel (or the run's end)
            assert notes == 1 and step["result"] == {"entered": "order #42"}, (notes, step)
            assert result.outcome in (Outcome.CANCELLED, Outcome.COMPLETED), result
            outcomes["committed"] += 1
    print(f"{ROUNDS} rounds: {outcomes}")
