"""Leases, the reaper, retries and the write fence, through the real runtime and store."""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from django.utils import timezone

from nrllm_agents import store
from nrllm_agents.executors import dispatch
from nrllm_agents.models import AgentRun, AgentRunEvent, CancelSource, Note, RunStatus
from nrllm_agents.runtime.agent_runtime import Outcome
from nrllm_agents.runtime.segment import identity
from nrllm_agents.testing.chat_server import ChatCompletionServer
from nrllm_agents.validation.run_request import RunRequest
from tests import waits
from tests.conftest import race_rounds
from tests.integration.runs import expire, kinds

SLOW_NOTE = {"slow_note": "nrllm_agents.testing.tools.SlowNote"}
STEPS = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i}+1"}}]} for i in range(3)] + [
    {"content": "done"}
]


def request(script: list[dict[str, Any]], tools: tuple[str, ...] = ("calculator",), **extra: Any) -> dict[str, Any]:
    return {"prompt": "liveness", "tools": list(tools), "script": script, **extra}


def sequences(run_id) -> list[int]:
    return list(AgentRunEvent.objects.filter(run_id=run_id).order_by("sequence").values_list("sequence", flat=True))


pytestmark = pytest.mark.django_db


def test_every_segment_holds_a_lease(runtime):
    seen: list[tuple[str, Any]] = []

    def observe(step):
        run = AgentRun.objects.get(pk=step["run_id"])
        seen.append((run.claimed_by, run.lease_expires))

    result = runtime.run(request(STEPS), on_step=observe)
    assert result.outcome == Outcome.COMPLETED
    owners = {owner for owner, _ in seen}
    assert len(owners) == 1 and next(iter(owners)).startswith("interactive:")
    assert all(lease and lease > timezone.now() - dt.timedelta(minutes=1) for _, lease in seen)
    done = AgentRun.objects.get(pk=result.run_id)
    assert done.lease_expires is None


def test_zombie_that_lost_its_lease_writes_nothing(runtime):
    """Mid-run, the lease is expired, the run reaped and claimed by another worker."""
    new_owner = identity("worker")

    def reap_under_it(step):
        if step["sequence"] == 2:
            expire(step["run_id"])
            assert [str(i) for i in store.reap().requeued] == [step["run_id"]]
            assert store.claim_queued(step["run_id"], claimed_by=new_owner, lease_expires=store.lease_until()).applied

    result = runtime.run(request(STEPS), on_step=reap_under_it)
    assert result.outcome == Outcome.LEASE_LOST
    run = AgentRun.objects.get(pk=result.run_id)
    assert run.status == RunStatus.RUNNING and run.claimed_by == new_owner  # not settled by the zombie
    assert sequences(result.run_id) == [0, 1]  # the step in flight when it lost the run was not appended


def test_cancel_landing_between_probe_and_renewal_is_a_cancellation(runtime, monkeypatch):
    real_record = store.record_step
    box: dict[str, Any] = {}

    def cancel_then_renew(run_id, owner, *args):
        if not box:
            box["cancel"] = runtime.cancel(run_id, source=CancelSource.SYSTEM, reason="between")
        return real_record(run_id, owner, *args)

    monkeypatch.setattr(store, "record_step", cancel_then_renew)
    result = runtime.run(request(STEPS))
    assert box["cancel"].was_executing
    assert result.outcome == Outcome.CANCELLED  # never "lease lost"
    assert kinds(result.run_id) == ["request", "cancelled"]
    assert AgentRun.objects.get(pk=result.run_id).stopped_at is not None


def test_reaper_requeues_and_another_worker_continues_without_gap_or_duplicate(runtime):
    run_id = runtime.enqueue(request(STEPS))
    first = identity("worker")
    assert store.claim_queued(run_id, claimed_by=first, lease_expires=store.lease_until()).applied
    # The first worker recorded two steps of round 1, then died (no more renewals).
    from nrllm_agents.domain import Step, StepKind
    from nrllm_agents.runtime.segment import SegmentTrace

    dead = SegmentTrace(run_id, owner=first, next_sequence=0)
    dead(Step(StepKind.REQUEST, 1, {"messages": [{"role": "user", "content": "liveness"}]}))
    dead(
        Step(
            StepKind.LLM,
            1,
            {
                "content": None,
                "usage": {},
                "tool_calls": [{"id": "call_1_1", "name": "calculator", "arguments": {"expression": "0+1"}}],
            },
        )
    )
    assert store.reap().requeued == []  # lease still valid: a slow-but-alive worker is left alone
    expire(run_id)
    assert store.reap(dry_run=True).requeued == [run_id]
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.RUNNING  # dry run changed nothing
    assert store.reap().requeued == [run_id]
    requeued = AgentRun.objects.get(pk=run_id)
    assert requeued.status == RunStatus.QUEUED and requeued.attempts == 1 and requeued.claimed_by == ""
    result = runtime.run_queued(run_id)
    assert result.outcome == Outcome.COMPLETED and result.final_text == "done"
    assert sequences(run_id) == list(range(len(sequences(run_id))))
    # The pending call of round 1 ran once; rounds 2..4 followed, as in an uninterrupted run.
    assert kinds(run_id) == ["request", "llm", "tool"] + ["request", "llm", "tool"] * 2 + ["request", "llm"]
    assert runtime.run_queued(run_id) is None


def test_reaper_dead_letters_when_budget_is_used(runtime, settings):
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "MAX_ATTEMPTS": 1}
    run = store.begin(
        RunRequest.from_mapping(request(STEPS)).row_fields(), claimed_by="worker:x:1:a", lease_expires=timezone.now()
    )
    AgentRun.objects.filter(pk=run.pk).update(attempts=1)
    expire(run.pk)
    report = store.reap()
    assert report.dead_lettered == {"retries_exhausted": 1}
    dead = AgentRun.objects.get(pk=run.pk)
    assert (dead.status, dead.termination_reason) == (RunStatus.FAILED, "retries_exhausted")


def test_orphaned_cancel_is_acknowledged_by_the_reaper(runtime):
    run = store.begin(
        RunRequest.from_mapping(request(STEPS)).row_fields(),
        claimed_by="worker:x:1:a",
        lease_expires=store.lease_until(),
    )
    runtime.cancel(run.pk, source=CancelSource.CLI)
    assert AgentRun.objects.get(pk=run.pk).stopped_at is None  # waiting for its segment to acknowledge
    expire(run.pk)
    assert store.reap().acknowledged == 1
    assert kinds(run.pk) == ["cancelled"] and AgentRun.objects.get(pk=run.pk).stopped_at is not None


@override_settings(NRLLM_AGENTS={"TOOLS": SLOW_NOTE, "IN_DOUBT": "fail"})
def test_write_fence_dead_letters_a_run_lost_during_a_non_idempotent_tool(runtime, monkeypatch):
    """The process dies after the tool's effect and before its step is recorded; ``IN_DOUBT =
    "fail"`` (the default waits for a person: test_in_doubt.py)."""
    from nrllm_agents.testing.tools import SlowNote

    def die_after_effect(self, arguments):
        Note.objects.create(run_id=self.run_id, title="once", body="")
        raise SystemExit("worker killed")  # not an Exception: nothing in the runtime handles it

    monkeypatch.setattr(SlowNote, "execute", die_after_effect)
    run_id = runtime.enqueue(
        request(
            [{"tool_calls": [{"name": "slow_note", "arguments": {"title": "t"}}]}, {"content": "ok"}],
            tools=("slow_note",),
        )
    )
    with pytest.raises(SystemExit):
        runtime.run_queued(run_id)
    stamped = AgentRun.objects.get(pk=run_id)
    assert stamped.status == RunStatus.RUNNING and stamped.pending_effect["call"]["name"] == "slow_note"
    expire(run_id)
    report = store.reap()
    assert report.dead_lettered == {"not_retryable": 1} and report.requeued == []
    dead = AgentRun.objects.get(pk=run_id)
    assert (dead.status, dead.termination_reason) == (RunStatus.FAILED, "not_retryable")
    assert Note.objects.filter(run_id=run_id).count() == 1
    assert runtime.run_queued(run_id) is None


@override_settings(NRLLM_AGENTS={"TOOLS": SLOW_NOTE})
def test_write_fence_is_cleared_once_the_step_is_recorded(runtime):
    result = runtime.run(
        request(
            [{"tool_calls": [{"name": "slow_note", "arguments": {"title": "t"}}]}, {"content": "ok"}],
            tools=("slow_note",),
        )
    )
    assert result.outcome == Outcome.COMPLETED
    assert AgentRun.objects.get(pk=result.run_id).pending_effect is None
    assert Note.objects.filter(run_id=result.run_id).count() == 1


@pytest.mark.django_db(transaction=True)  # the in-process executor's threads need committed rows
class TestRetries:
    def run_against(self, server: ChatCompletionServer, monkeypatch, settings) -> tuple[Any, list[float]]:
        settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "MAX_ATTEMPTS": 3, "RETRY_BASE_SECONDS": 0.05}
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret-key-123")
        delays: list[float] = []
        real_dispatch = dispatch.dispatch

        def record(run_id, **kw):
            delays.append(kw.get("delay_seconds", 0))
            return real_dispatch(run_id, **kw)

        monkeypatch.setattr(dispatch, "dispatch", record)
        from nrllm_agents.runtime.agent_runtime import AgentRuntime

        run_id = AgentRuntime().enqueue({"prompt": "hi", "provider": "openai", "model": "m", "tools": []})
        assert waits.wait_local_idle(60)
        connection.close()
        return AgentRun.objects.get(pk=run_id), delays

    def test_transient_failures_retry_with_growing_delays_until_the_budget(self, monkeypatch, settings):
        with ChatCompletionServer() as server:
            server.queue(*[{"status": 503, "error": "overloaded"}] * 4)
            run, delays = self.run_against(server, monkeypatch, settings)
        assert (run.status, run.termination_reason, run.attempts) == (RunStatus.FAILED, "retries_exhausted", 3)
        assert delays[0] == 0 and delays[1:] == [0.05, 0.1, 0.2]
        # each attempt asked once, its failure recorded; the stream continues across them
        assert kinds(run.pk) == ["request", "llm"] * 4
        failures = AgentRunEvent.objects.filter(run_id=run.pk, kind="llm").values_list("payload", flat=True)
        assert all(
            p["failed"] and p["error"].startswith("ProviderError: InternalServerError (HTTP 503)") for p in failures
        )
        assert run.iterations == 0  # a failed call is no turn
        assert "sk-test-secret-key-123" not in run.error_message

    def test_a_transient_failure_then_success_completes(self, monkeypatch, settings):
        with ChatCompletionServer() as server:
            server.queue({"status": 500, "error": "boom"}, {"content": "recovered"})
            run, delays = self.run_against(server, monkeypatch, settings)
        assert (run.status, run.final_text, run.attempts) == (RunStatus.COMPLETED, "recovered", 1)
        assert kinds(run.pk) == ["request", "llm", "request", "llm"]

    def test_a_handed_back_run_keeps_its_spend_and_stays_queued_when_the_queue_is_away(self, monkeypatch, settings):
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        calls: list[float] = []
        real_dispatch = dispatch.dispatch

        def first_only(run_id, **kw):  # the retry's job meets an outage: the run stays queued
            calls.append(kw.get("delay_seconds", 0))
            if len(calls) > 1:
                raise ConnectionError("queue away")
            return real_dispatch(run_id, **kw)

        monkeypatch.setattr(dispatch, "dispatch", first_only)
        with ChatCompletionServer() as server:
            monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
            call = {"name": "calculator", "arguments": {"expression": "1+1"}}
            server.queue({"tool_calls": [call], "usage": {"prompt_tokens": 30, "completion_tokens": 7}})
            server.queue({"status": 503, "error": "overloaded"})
            from nrllm_agents.runtime.agent_runtime import AgentRuntime

            request = {"prompt": "hi", "provider": "openai", "model": "m", "tools": ["calculator"]}
            run_id = AgentRuntime().enqueue(request)
            assert waits.wait_local_idle(60)
        connection.close()
        run = AgentRun.objects.get(pk=run_id)
        assert (run.status, run.termination_reason) == (RunStatus.QUEUED, "")
        # What it spent before the hand-back stays on the row (it was written by the requeue).
        assert (run.iterations, run.prompt_tokens, run.completion_tokens) == (1, 30, 7)

    def test_unauthorized_dead_letters_at_once(self, monkeypatch, settings):
        with ChatCompletionServer() as server:
            server.queue({"status": 401, "error": "bad key"})
            run, delays = self.run_against(server, monkeypatch, settings)
        assert (run.status, run.termination_reason, run.attempts) == (RunStatus.FAILED, "not_retryable", 0)
        assert delays == [0]


@pytest.mark.django_db(transaction=True)  # the renewing thread and the reaper use their own connections
def test_heartbeat_racing_the_reaper_keeps_the_live_worker(runtime):
    """Many rounds: whenever the heartbeat lands, the reaper leaves the run alone; never both win."""
    rounds = race_rounds(200 if connection.vendor == "postgresql" else 60)
    kept = reaped = 0
    for _ in range(rounds):
        owner = identity("worker")
        run = store.begin(
            RunRequest.from_mapping(request(STEPS)).row_fields(),
            claimed_by=owner,
            lease_expires=timezone.now() - dt.timedelta(milliseconds=1),
        )
        barrier = threading.Barrier(2)
        out: dict[str, Any] = {}

        def heartbeat():
            barrier.wait(10)
            out["renewed"] = store.renew(run.pk, owner)
            connection.close()

        def reaper():
            barrier.wait(10)
            out["report"] = store.reap()
            connection.close()

        threads = [threading.Thread(target=heartbeat), threading.Thread(target=reaper)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        final = AgentRun.objects.get(pk=run.pk)
        if out["renewed"] is store.Lease.HELD:
            kept += 1
            assert final.status == RunStatus.RUNNING and final.claimed_by == owner
            assert run.pk not in out["report"].requeued
        else:
            reaped += 1
            assert run.pk in out["report"].requeued and final.status == RunStatus.QUEUED
    assert kept + reaped == rounds
