"""A claim whose connection dies (issue 44, item 16): the worker tries it again at once on a fresh
connection, and a claim that had committed before its reply was lost is recognised as won. The
run goes on in the same job; it waits neither for a retried job nor for the reaper."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

from nrllm_agents import store
from nrllm_agents.models import AgentRun, AgentRunEvent, RunStatus
from tests.integration.runs import queued
from tests.integration.runtime.test_liveness import STEPS, request

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres_only]


def terminate_own_backend() -> None:
    """Kill this thread's database connection from another one, as a failover or an operator's
    ``pg_terminate_backend`` would."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    params = connection.get_connection_params()
    with psycopg.connect(**{k: v for k, v in params.items() if k in ("host", "port", "user", "dbname")}) as killer:
        killer.execute("SELECT pg_terminate_backend(%s)", [pid])


@pytest.mark.parametrize("when", ["before the claim", "after the claim committed"])
def test_a_claim_whose_connection_dies_is_tried_again_and_the_run_goes_on(runtime, monkeypatch, when):
    run_id = queued(request(STEPS))  # no job: only this test's call executes it
    real, calls = store.claim_queued, []

    def claim(*args, **kwargs):
        calls.append(kwargs["claimed_by"])
        if len(calls) == 1:
            if when == "before the claim":
                terminate_own_backend()
                return real(*args, **kwargs)  # its first query meets the dead connection
            won = real(*args, **kwargs)
            assert won.applied
            terminate_own_backend()
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")  # the reply that never came
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "claim_queued", claim)
    result = runtime.run_queued(run_id)
    assert result is not None and result.outcome.value == "completed", (calls, AgentRun.objects.get(pk=run_id).status)
    assert len(calls) == 2 and calls[0] == calls[1]  # the same segment tried again
    run = AgentRun.objects.get(pk=run_id)
    assert (run.status, run.attempts) == (RunStatus.COMPLETED, 0)
    kinds = list(AgentRunEvent.objects.filter(run_id=run_id).order_by("sequence").values_list("kind", flat=True))
    assert kinds == ["request", "llm", "tool"] * 3 + ["request", "llm"]


def test_a_claim_tried_again_by_another_segment_still_loses():
    run_id = queued(request(STEPS))
    assert store.claim_queued(run_id, claimed_by="worker:a").applied
    assert store.claim_queued(run_id, claimed_by="worker:a").applied  # its own win, read back
    lost = store.claim_queued(run_id, claimed_by="worker:b")
    assert (lost.applied, lost.status) == (False, RunStatus.RUNNING)
    assert AgentRun.objects.get(pk=run_id).claimed_by == "worker:a"


def test_a_hand_back_whose_reply_was_lost_still_wakes_a_worker(runtime, monkeypatch):
    """A segment hands its run back (here: its process shuts down) and the connection dies after
    the hand-back committed, and again before the dispatch reads the run's segment number. The run
    is queued and a job names its next segment: it waits neither for the queued sweep nor for the
    reaper (the storm test found a run left queued with no job)."""
    from nrllm_agents import executors
    from nrllm_agents.runtime import segment

    run_id = queued(request(STEPS))
    real, calls, jobs = store.requeue, [], []

    def requeue(*args, **kwargs):
        calls.append(kwargs)
        answer = real(*args, **kwargs)
        terminate_own_backend()
        if len(calls) == 1:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")  # the reply that never came
        return answer  # the second try's refusal; the dispatch's read then meets a dead connection

    class Queue:
        def submit(self, run_id: str, *, job_id: str, delay_seconds: float = 0) -> None:
            jobs.append(job_id)

    monkeypatch.setattr(store, "requeue", requeue)
    monkeypatch.setattr(executors, "chosen", Queue)
    segment.shutdown_requested.set()  # hand back at the first boundary
    try:
        result = runtime.run_queued(run_id)
    finally:
        segment.shutdown_requested.clear()
    assert result is not None and result.outcome.value == "requeued", result
    assert len(calls) == 2
    steps = AgentRunEvent.objects.filter(run_id=run_id).count()
    assert jobs == [f"nrllm-run-{run_id}-{steps}"]
    run = AgentRun.objects.get(pk=run_id)
    assert (run.status, run.claimed_by, run.attempts) == (RunStatus.QUEUED, "", 0)
