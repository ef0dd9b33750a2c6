"""The design page's consequences, through the real runtime and store (PostgreSQL and SQLite)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from django.db import OperationalError, connection

from nrllm_agents import store
from nrllm_agents.models import AgentRun, AgentRunEvent, CancelSource, RunStatus
from nrllm_agents.runtime.agent_runtime import (
    ApprovalNotPending,
    CancelOutcome,
    InvalidRunId,
    Outcome,
    RunNotFound,
    parse_run_id,
)
from nrllm_agents.validation.run_request import InvalidRequest
from tests.integration.runs import kinds

TWO_TOOLS = [
    {
        "tool_calls": [
            {"name": "calculator", "arguments": {"expression": "1+1"}},
            {"name": "calculator", "arguments": {"expression": "2+2"}},
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
    },
    {"content": "4", "usage": {"prompt_tokens": 20, "completion_tokens": 2}},
]
GATED = [
    {
        "tool_calls": [
            {"name": "calculator", "arguments": {"expression": "3*3"}},
            {"name": "write_note", "arguments": {"title": "t", "body": "b"}},
        ]
    },
    {"content": "noted"},
]


def request(script, tools=("calculator",), **extra):
    return {"prompt": "test", "tools": list(tools), "script": script, **extra}


def journal(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


class CancelAt:
    """An ``on_step`` observer that cancels the run while the n-th step is in flight.

    The observer sees a step before it is persisted, so the cancel commits while that step
    is in flight; the probe right after persisting it must stop the run there.
    """

    def __init__(self, runtime, n: int) -> None:
        self.runtime, self.n, self.seen = runtime, n, []

    def __call__(self, step: dict) -> None:
        self.seen.append(step)
        if len(self.seen) - 1 == self.n:
            self.runtime.cancel(step["run_id"], source=CancelSource.SYSTEM, reason="test")


pytestmark = pytest.mark.django_db


def test_run_completes_and_records_the_stream(runtime):
    result = runtime.run(request(TWO_TOOLS))
    assert result.outcome == Outcome.COMPLETED and result.status == RunStatus.COMPLETED
    assert result.final_text == "4" and result.steps == 6
    assert kinds(result.run_id) == ["request", "llm", "tool", "tool", "request", "llm"]
    assert [e.sequence for e in runtime.events(result.run_id)] == list(range(6))
    run = runtime.status(result.run_id)
    assert (run.iterations, run.prompt_tokens, run.completion_tokens) == (2, 30, 7)
    assert run.termination_reason == "completed" and run.started_at and run.finished_at


@pytest.mark.parametrize("boundary, last_kind", [(0, "request"), (1, "llm"), (2, "tool"), (3, "tool")])
def test_cancel_stops_at_the_boundary_and_acknowledges(runtime, boundary, last_kind, tmp_path, monkeypatch):
    monkeypatch.setenv("NRLLM_CALL_JOURNAL", str(tmp_path / "j.jsonl"))
    observer = CancelAt(runtime, boundary)
    result = runtime.run(request(TWO_TOOLS), on_step=observer)
    assert result.outcome == Outcome.CANCELLED and result.status == RunStatus.CANCELLED
    events = runtime.events(result.run_id)
    assert [e.kind for e in events][-2:] == [last_kind, "cancelled"]
    assert len(events) == boundary + 2  # the in-flight step, then the acknowledgement
    ack = events[-1].payload
    assert ack["boundary_sequence"] == boundary and ack["source"] == "system" and ack["reason"] == "test"
    # Nothing started after the boundary: journaled starts match the recorded steps.
    starts = journal(tmp_path / "j.jsonl")
    assert sum(1 for s in starts if s["what"] == "model") == sum(1 for e in events if e.kind == "llm")
    assert sum(1 for s in starts if s["what"] == "tool") == sum(1 for e in events if e.kind == "tool")
    run = runtime.status(result.run_id)
    assert run.stopped_at and run.stopped_at >= run.cancel_requested_at
    assert run.request_payload is None and run.suspended_state is None
    # The observer saw the acknowledgement too (it feeds live streams).
    assert observer.seen[-1]["kind"] == "cancelled"


def test_failing_probe_never_fabricates_a_cancellation(runtime):
    """Every boundary probe (the lease renewal) fails at the database layer; the run still completes."""
    failures = []

    def fail_probe(execute, sql, params, many, context):
        statement = sql.replace('"', "")
        # The probe is the boundary's lease renewal (on PostgreSQL one statement with the append).
        if statement.startswith(
            (
                "UPDATE nrllm_agents_agentrun SET lease_expires = ",
                "WITH renewed AS (UPDATE nrllm_agents_agentrun SET lease_expires = ",
            )
        ):
            failures.append(sql)
            raise OperationalError("simulated store hiccup")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(fail_probe):
        result = runtime.run(request(TWO_TOOLS))
    # Each boundary retries its guarded statement a few times before falling back, and reads
    # the row again before the next start: at least one failure per boundary.
    assert len(failures) >= 6, "every boundary's probe should have been exercised"
    assert result.outcome == Outcome.COMPLETED and runtime.status(result.run_id).status == RunStatus.COMPLETED
    assert "cancelled" not in kinds(result.run_id)


def test_cancel_that_wins_against_settle_reports_cancelled(runtime, monkeypatch):
    """The cancel lands after the last boundary, before the settle: the settle is refused."""
    real_settle = store.settle

    def cancel_first(run_id, **kw):
        runtime.cancel(run_id, source=CancelSource.SYSTEM)
        return real_settle(run_id, **kw)

    monkeypatch.setattr(store, "settle", cancel_first)
    result = runtime.run(request([{"content": "answer"}]))
    assert result.outcome == Outcome.CANCELLED and result.status == RunStatus.CANCELLED
    assert kinds(result.run_id) == ["request", "llm", "cancelled"]
    assert runtime.status(result.run_id).final_text == ""


def test_cancel_that_wins_against_suspend_reports_cancelled(runtime, monkeypatch):
    real_suspend = store.suspend

    def cancel_first(run_id, **kw):
        runtime.cancel(run_id, source=CancelSource.SYSTEM)
        return real_suspend(run_id, **kw)

    monkeypatch.setattr(store, "suspend", cancel_first)
    result = runtime.run(request(GATED, tools=("calculator", "write_note")))
    assert result.outcome == Outcome.CANCELLED
    assert runtime.status(result.run_id).status == RunStatus.CANCELLED
    assert kinds(result.run_id)[-1] == "cancelled"


def test_approve_shares_the_hook(runtime):
    first = runtime.run(request(GATED, tools=("calculator", "write_note")))
    assert first.outcome == Outcome.AWAITING_APPROVAL
    assert [c["name"] for c in first.pending_calls] == ["calculator", "write_note"]
    # Cancel while the first approved tool is in flight: the second tool never starts.
    observer = CancelAt(runtime, 1)  # 0 = approval step, 1 = first tool
    result = runtime.approve(first.run_id, True, on_step=observer)
    assert result.outcome == Outcome.CANCELLED
    assert kinds(first.run_id) == ["request", "llm", "approval", "tool", "cancelled"]
    from nrllm_agents.models import Note

    assert not Note.objects.filter(run_id=first.run_id).exists()


def test_approve_then_complete_and_deny(runtime):
    from nrllm_agents.models import Note

    a = runtime.run(request(GATED, tools=("calculator", "write_note")))
    done = runtime.approve(a.run_id, True)
    assert done.outcome == Outcome.COMPLETED and done.final_text == "noted"
    assert Note.objects.filter(run_id=a.run_id).count() == 1
    b = runtime.run(request(GATED, tools=("calculator", "write_note")))
    denied = runtime.approve(b.run_id, False)
    assert denied.outcome == Outcome.COMPLETED
    assert not Note.objects.filter(run_id=b.run_id).exists()
    approval = [e for e in runtime.events(b.run_id) if e.kind == "approval"][0]
    assert approval.payload["approved"] is False
    with pytest.raises(ApprovalNotPending, match="completed, not waiting"):
        runtime.approve(b.run_id, True)


def test_waiting_run_cancelled_cannot_be_approved(runtime):
    a = runtime.run(request(GATED, tools=("calculator", "write_note")))
    cancel = runtime.cancel(a.run_id, source=CancelSource.CLI, reason="changed my mind")
    assert cancel.outcome == CancelOutcome.CANCELLED and not cancel.was_executing
    with pytest.raises(ApprovalNotPending, match="cancelled"):
        runtime.approve(a.run_id, True)
    events = runtime.events(a.run_id)
    assert events[-1].kind == "cancelled" and events[-1].payload["boundary_sequence"] == events[-2].sequence
    run = runtime.status(a.run_id)
    assert run.suspended_state is None and run.stopped_at is not None


def test_queued_run_cancelled_before_claim_never_executes(runtime, tmp_path, monkeypatch):
    monkeypatch.setenv("NRLLM_CALL_JOURNAL", str(tmp_path / "j.jsonl"))
    # Inside the test transaction on_commit never fires: the run stays queued, unclaimed.
    run_id = runtime.enqueue(request(TWO_TOOLS))
    assert runtime.status(run_id).status == RunStatus.QUEUED
    assert runtime.cancel(run_id, source=CancelSource.API).outcome == CancelOutcome.CANCELLED
    assert runtime.run_queued(run_id) is None
    assert kinds(run_id) == ["cancelled"]
    assert journal(tmp_path / "j.jsonl") == []
    assert runtime.status(run_id).request_payload is None


def test_run_queued_shares_the_hook(runtime):
    run_id = runtime.enqueue(request(TWO_TOOLS))
    result = runtime.run_queued(run_id, on_step=CancelAt(runtime, 2))
    assert result.outcome == Outcome.CANCELLED
    assert kinds(run_id) == ["request", "llm", "tool", "cancelled"]
    assert runtime.run_queued(run_id) is None  # a second delivery loses the claim


def test_terminal_is_terminal(runtime):
    done = runtime.run(request([{"content": "x"}]))
    before = list(AgentRun.objects.filter(pk=done.run_id).values())
    again = runtime.cancel(done.run_id, source=CancelSource.CLI)
    assert again.outcome == CancelOutcome.ALREADY_FINISHED and again.status == RunStatus.COMPLETED
    assert not store.settle(done.run_id, status=RunStatus.FAILED, reason="tool_failed").applied
    assert list(AgentRun.objects.filter(pk=done.run_id).values()) == before
    assert AgentRunEvent.objects.filter(run_id=done.run_id).count() == 2
    cancelled = runtime.run(request(GATED, tools=("calculator", "write_note")))
    runtime.cancel(cancelled.run_id, source=CancelSource.CLI)
    assert runtime.cancel(cancelled.run_id, source=CancelSource.CLI).outcome == CancelOutcome.ALREADY_CANCELLED
    assert not store.settle(cancelled.run_id, status=RunStatus.COMPLETED, reason="completed").applied
    assert not store.claim_for_resume(cancelled.run_id).applied


def test_unknown_and_malformed_ids(runtime):
    import uuid

    assert runtime.cancel(uuid.uuid4(), source=CancelSource.CLI).outcome == CancelOutcome.NOT_FOUND
    with pytest.raises(RunNotFound):
        runtime.approve(uuid.uuid4(), True)
    with pytest.raises(InvalidRunId):
        parse_run_id("not-a-uuid")
    with pytest.raises(InvalidRunId):
        runtime.cancel("1; DROP TABLE x", source=CancelSource.CLI)


def test_invalid_requests_store_nothing(runtime):
    with pytest.raises(InvalidRequest) as info:
        runtime.run({"prompt": "", "tools": ["nope"], "max_iterations": 0, "script": "[{", "provider": "x"})
    assert set(info.value.errors) >= {"prompt", "tools", "max_iterations", "provider"}
    assert not AgentRun.objects.exists()


def test_failures_are_recorded_with_reasons(runtime):
    capped = runtime.run(
        request([{"tool_calls": [{"name": "calculator", "arguments": {"expression": "1"}}]}] * 3, max_iterations=2)
    )
    assert capped.outcome == Outcome.FAILED and capped.termination_reason == "max_iterations"
    exhausted = runtime.run(request([{"tool_calls": [{"name": "calculator", "arguments": {"expression": "1"}}]}]))
    assert exhausted.termination_reason == "provider_failed" and "exhausted" in exhausted.error


@pytest.mark.django_db(transaction=True)  # the cancel comes from another thread with its own connection
def test_cancel_from_another_thread_mid_run(runtime):
    slow = [{"delay": 0.1, "tool_calls": [{"name": "sleep", "arguments": {"seconds": 0.1}}]}] * 30 + [{"content": "x"}]
    seen = threading.Event()
    box = {}

    def observe(step):
        box.setdefault("id", step["run_id"])
        if step["sequence"] >= 4:
            seen.set()

    def canceller():
        seen.wait(30)
        try:
            box["cancel"] = runtime.cancel(box["id"], source=CancelSource.CLI)
        finally:
            connection.close()

    t = threading.Thread(target=canceller)
    t.start()
    result = runtime.run(request(slow, tools=("sleep",), max_iterations=len(slow)), on_step=observe)
    t.join()
    assert box["cancel"].was_executing
    assert result.outcome == Outcome.CANCELLED
    events = runtime.events(result.run_id)
    assert events[-1].kind == "cancelled" and events[-1].payload["boundary_sequence"] == events[-2].sequence
    assert len(events) < 60
