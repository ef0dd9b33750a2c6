"""Deadlines and token budgets stop runs like an operator's cancel (PostgreSQL and SQLite)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from nrllm_agents import store
from nrllm_agents.domain import Usage
from nrllm_agents.models import AgentRun, AgentRunEvent, RunStatus, TerminationReason
from nrllm_agents.runtime import limits
from nrllm_agents.runtime.agent_runtime import Outcome
from nrllm_agents.validation.run_request import InvalidRequest, RunRequest
from tests.integration.runs import kinds

pytestmark = pytest.mark.django_db

CALC = {"name": "calculator", "arguments": {"expression": "1+1"}}


def long_script(turns: int = 9, delay: float = 0.5, tokens: int = 0) -> list[dict]:
    turn = {"delay": delay, "tool_calls": [CALC]}
    if tokens:
        turn["usage"] = {"prompt_tokens": tokens - 10, "completion_tokens": 10}
    return [dict(turn) for _ in range(turns)] + [{"content": "done"}]


def journal(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_deadline_stops_a_long_run_within_one_step(runtime, tmp_path, monkeypatch):
    monkeypatch.setenv("NRLLM_CALL_JOURNAL", str(tmp_path / "j.jsonl"))
    result = runtime.run({"prompt": "p", "tools": ["calculator"], "script": long_script(), "deadline_seconds": 2})
    assert result.outcome == Outcome.CANCELLED
    run = runtime.status(result.run_id)
    assert (run.status, run.termination_reason, run.cancel_source) == ("cancelled", "deadline_exceeded", "system")
    assert run.stopped_at and run.cancelled_by is None
    events = runtime.events(result.run_id)
    ack = events[-1]
    assert ack.kind == "cancelled" and [e.kind for e in events].count("cancelled") == 1
    assert ack.payload["termination_reason"] == "deadline_exceeded" and ack.payload["source"] == "system"
    assert ack.payload["limit"]["limit"] == "deadline_seconds" and ack.payload["limit"]["value"] == 2
    assert ack.payload["limit"]["measured"] >= 2 and "deadline" in ack.payload["reason"]
    # Within one step: the step before the stopping boundary was recorded before the deadline.
    boundary = events[ack.payload["boundary_sequence"]]
    assert boundary.created_at > run.deadline_at >= events[boundary.sequence - 1].created_at
    # Nothing started after the boundary, nothing settled.
    starts = journal(tmp_path / "j.jsonl")
    assert sum(s["what"] == "model" for s in starts) == sum(e.kind == "llm" for e in events)
    assert sum(s["what"] == "tool" for s in starts) == sum(e.kind == "tool" for e in events)
    assert run.final_text == "" and run.finished_at


def test_budget_stops_after_the_crossing_call_and_nothing_starts_after(runtime, tmp_path, monkeypatch):
    monkeypatch.setenv("NRLLM_CALL_JOURNAL", str(tmp_path / "j.jsonl"))
    result = runtime.run(
        {"prompt": "p", "tools": ["calculator"], "script": long_script(delay=0, tokens=100), "max_total_tokens": 250}
    )
    run = runtime.status(result.run_id)
    assert (run.status, run.termination_reason, run.cancel_source) == ("cancelled", "budget_exceeded", "system")
    assert kinds(run.pk) == ["request", "llm", "tool", "request", "llm", "tool", "request", "llm", "cancelled"]
    assert run.total_tokens == 300 and run.iterations == 3  # the crossing call is counted
    ack = runtime.events(run.pk)[-1].payload
    assert ack["limit"] == {"limit": "max_total_tokens", "value": 250, "measured": 300, "unit": "tokens"}
    assert ack["boundary_sequence"] == 7  # the llm step that crossed it
    starts = journal(tmp_path / "j.jsonl")
    assert [s["what"] for s in starts] == ["model", "tool", "model", "tool", "model"]


def test_a_run_within_its_limits_completes(runtime):
    result = runtime.run(
        {
            "prompt": "p",
            "tools": ["calculator"],
            "script": long_script(turns=2, delay=0, tokens=100),
            "max_total_tokens": 200,
            "deadline_seconds": 600,
        }
    )
    run = runtime.status(result.run_id)
    assert run.status == RunStatus.COMPLETED and run.total_tokens == 200  # reaching the budget is not exceeding it
    assert abs((run.deadline_at - run.created_at).total_seconds() - 600) < 1


def test_a_limited_run_of_no_tree_reads_no_tree_and_writes_no_spend_at_its_boundaries(runtime):
    """A tree's limits cost its runs a spend write and a read of the tree after each model answer
    (``store.tree_spend``); a run of no tree pays neither."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    request = {"prompt": "p", "tools": ["calculator"], "script": long_script(turns=3, delay=0, tokens=100)}
    with CaptureQueriesContext(connection) as queries:
        result = runtime.run({**request, "max_total_tokens": 1000, "max_cost": "5"})
    assert runtime.status(result.run_id).status == RunStatus.COMPLETED
    tree_reads = [q["sql"] for q in queries if '"tree_root_id" =' in q["sql"] and " OR " in q["sql"]]
    spend_writes = [q["sql"] for q in queries if q["sql"].startswith("UPDATE") and '"prompt_tokens" =' in q["sql"]]
    assert tree_reads == [] and len(spend_writes) <= 1  # the settle writes its spend once


def test_queued_run_overdue_before_any_worker_is_cancelled_by_the_sweep_and_never_executes(
    runtime, tmp_path, monkeypatch
):
    monkeypatch.setenv("NRLLM_CALL_JOURNAL", str(tmp_path / "j.jsonl"))
    request = RunRequest.from_mapping(
        {"prompt": "p", "tools": ["calculator"], "script": long_script(turns=1), "deadline_seconds": 1}
    )
    run = store.create_queued(request.row_fields(), request.as_dict())  # no worker has it yet
    assert limits.sweep().cancelled == []  # not overdue yet
    later = timezone.now() + timedelta(seconds=5)
    report = limits.sweep(now=later)
    assert report.cancelled == [run.pk]
    assert runtime.run_queued(run.pk) is None  # the worker's claim loses: it never executes
    run.refresh_from_db()
    assert (run.status, run.termination_reason, run.cancel_source) == ("cancelled", "deadline_exceeded", "system")
    assert kinds(run.pk) == ["cancelled"]
    ack = AgentRunEvent.objects.get(run=run).payload
    assert ack["limit"]["limit"] == "deadline_seconds" and ack["limit"]["measured"] >= 5
    assert journal(tmp_path / "j.jsonl") == []
    assert limits.sweep(now=later).cancelled == []  # terminal is terminal


def test_reaper_cancels_an_overdue_run_whose_worker_died_instead_of_requeueing_it(runtime):
    request = RunRequest.from_mapping({"prompt": "p", "script": long_script(turns=1), "deadline_seconds": 60})
    past = timezone.now() - timedelta(seconds=1)
    run = store.begin(request.row_fields(), claimed_by="worker:dead:1:x", lease_expires=past)
    AgentRun.objects.filter(pk=run.pk).update(deadline_at=past)  # both expired: nothing executes it
    report = runtime.reap()
    assert report.deadline_cancelled == 1 and report.requeued == [] and report.acknowledged == 1
    assert "1 cancelled (deadline_exceeded)" in report.summary()
    run.refresh_from_db()
    assert (run.status, run.termination_reason) == ("cancelled", "deadline_exceeded") and run.stopped_at
    assert kinds(run.pk) == ["cancelled"]
    assert AgentRunEvent.objects.get(run=run).payload["limit"]["limit"] == "deadline_seconds"


def test_time_waiting_for_approval_does_not_count(runtime):
    gated = [{"tool_calls": [{"name": "write_note", "arguments": {"title": "t", "body": "b"}}]}, {"content": "ok"}]
    result = runtime.run({"prompt": "p", "tools": ["write_note"], "script": gated, "deadline_seconds": 60})
    assert result.outcome == Outcome.AWAITING_APPROVAL
    run = runtime.status(result.run_id)
    before = run.deadline_at
    # The sweep never touches a waiting run, however long it waits.
    assert limits.sweep(now=timezone.now() + timedelta(hours=2)).cancelled == []
    # The wait began ten minutes ago (the last step was recorded then).
    AgentRunEvent.objects.filter(run=run).update(created_at=timezone.now() - timedelta(minutes=10))
    resumed = runtime.approve(run.pk, True)
    assert resumed.outcome == Outcome.COMPLETED
    run.refresh_from_db()
    assert timedelta(minutes=10) <= run.deadline_at - before < timedelta(minutes=11)


def test_an_operator_cancel_that_won_first_is_kept(runtime):
    request = RunRequest.from_mapping({"prompt": "p", "script": long_script(turns=1), "max_total_tokens": 1})
    run = store.begin(request.row_fields(), claimed_by="me")
    runtime.cancel(run.pk, source="api", reason="by hand")
    fence = limits.enforce(run.pk, usage=Usage(5, 5))
    assert fence is not None and not fence.applied  # stopped either way; the first cancel stands
    run.refresh_from_db()
    assert (run.termination_reason, run.cancel_source, run.cancel_reason) == ("cancelled", "api", "by hand")


@pytest.mark.parametrize(
    "field, bad",
    [
        ("deadline_seconds", 0),
        ("deadline_seconds", "5"),
        ("deadline_seconds", True),
        ("max_total_tokens", -1),
        ("max_total_tokens", 10**12),
    ],
)
def test_limits_are_validated(field, bad):
    with pytest.raises(InvalidRequest) as info:
        RunRequest.from_mapping({"prompt": "p", field: bad})
    assert field in info.value.errors


def test_defaults_come_from_settings(settings):
    settings.NRLLM_AGENTS = {
        "DEFAULT_DEADLINE_SECONDS": 30,
        "DEFAULT_MAX_TOTAL_TOKENS": 1000,
        "DEADLINE_SECONDS_LIMIT": 60,
    }
    request = RunRequest.from_mapping({"prompt": "p"})
    assert (request.deadline_seconds, request.max_total_tokens) == (30, 1000)
    assert RunRequest.from_mapping({"prompt": "p", "deadline_seconds": None}).deadline_seconds is None
    with pytest.raises(InvalidRequest):
        RunRequest.from_mapping({"prompt": "p", "deadline_seconds": 61})
    assert TerminationReason.DEADLINE_EXCEEDED in TerminationReason.values


def test_limits_that_could_not_be_read_are_read_again_at_the_next_boundary(runtime):
    """Issue 20 item 15: a failed read of a segment's limits (an OperationalError in a statement
    storm) left its deadline and budget unenforced for the rest of the segment. It is read again
    at the next boundary, and once read, never again (no query per step)."""
    from django.db import OperationalError, connection

    reads = {"tried": 0, "failures": 2}  # the segment's start and its first boundary fail

    def storm(execute, sql, params, many, context):
        columns = sql.split(" FROM ")[0]
        # limits.read: the limit columns and the run's place in a tree (a row read for anything
        # else has many more)
        if columns.startswith("SELECT") and "max_total_tokens" in columns and columns.count(",") <= 6:
            reads["tried"] += 1
            if reads["tried"] <= reads["failures"]:
                raise OperationalError("canceling statement due to statement timeout")
        return execute(sql, params, many, context)

    request = {"prompt": "p", "tools": ["calculator"], "script": long_script(delay=0, tokens=100)}
    with connection.execute_wrapper(storm):
        result = runtime.run({**request, "max_total_tokens": 250})
    run = runtime.status(result.run_id)
    assert (run.status, run.termination_reason) == ("cancelled", "budget_exceeded")
    assert run.total_tokens == 300  # stopped at the boundary that crossed it, as without the storm
    assert reads["tried"] == 3  # two failures, one read, then none for the other boundaries
