"""Queued runs: enqueue, the claim, fail-closed dispatch and the in-process executor.

These tests use the real Redis (db from ``NRLLM_TEST_REDIS_URL``) and the real database, but
no worker processes: jobs are inspected in Redis, and claims are driven by calling the runtime
(or the job function) directly. Real ``rqworker`` processes are in ``tests/e2e/workers/test_rqworker.py``.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, transaction

from nrllm_agents import executors, store
from nrllm_agents.executors import dispatch, recovery
from nrllm_agents.models import AgentRun, AgentRunEvent, CancelSource, Note, RunStatus
from nrllm_agents.presentation.outcomes import queued_wording
from nrllm_agents.runtime.agent_runtime import ApprovalNotPending, InvalidRunId, Outcome
from nrllm_agents.validation.run_request import RunRequest
from nrllm_agents.workers import jobs
from tests import waits
from tests.conftest import is_postgres, manage
from tests.integration.runs import kinds

SCRIPT = [
    {"tool_calls": [{"name": "calculator", "arguments": {"expression": "6 * 7"}}]},
    {"content": "42"},
]
REQUEST = {"prompt": "what is 6 * 7?", "tools": ["calculator"], "script": SCRIPT}
NOTE_REQUEST = {
    "prompt": "save a note",
    "tools": ["write_note"],
    "script": [
        {"tool_calls": [{"name": "write_note", "arguments": {"title": "t", "body": "b"}}]},
        {"content": "saved"},
    ],
}


# --- helpers ---------------------------------------------------------------------------------
@pytest.fixture
def rq_queue(settings, redis_url):
    """Point this process's dispatch at the test Redis; return the django-rq queue."""
    import django_rq

    settings.REDIS_URL = redis_url
    settings.RQ_QUEUES = {"default": {"URL": redis_url}}
    return django_rq.get_queue("default")


@pytest.fixture
def no_redis(settings):
    """No REDIS_URL: queued runs go to the in-process executor."""
    settings.REDIS_URL = None
    yield
    assert waits.wait_local_idle(30), "in-process executor still busy after the test"


@pytest.fixture
def journal(monkeypatch, tmp_path) -> Path:
    """The call journal of this process: one line per model call / tool start."""
    path = tmp_path / "journal.jsonl"
    monkeypatch.setenv("NRLLM_CALL_JOURNAL", str(path))
    return path


def journal_of(path: Path, run_id: Any) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [line for line in lines if line.get("run_id") == str(run_id)]


def shape(run_id: Any) -> list[tuple[str, int]]:
    return list(AgentRunEvent.objects.filter(run_id=run_id).order_by("sequence").values_list("kind", "round"))


def queued_row(data: dict[str, Any]) -> AgentRun:
    """A queued run stored without dispatching any job (for driving claims by hand)."""
    request = RunRequest.from_mapping(data)
    return store.create_queued(request.row_fields(), request.as_dict())


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- enqueue ---------------------------------------------------------------------------------
@pytest.mark.django_db
def test_enqueue_stores_the_request_and_the_job_carries_only_the_run_id(
    runtime, rq_queue, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True) as hooks:
        run_id = runtime.enqueue(REQUEST)
    assert len(hooks) == 1
    run = AgentRun.objects.get(pk=run_id)
    assert run.status == RunStatus.QUEUED and run.started_at is None
    assert run.request_payload == RunRequest.from_mapping(REQUEST).as_dict()

    job = rq_queue.fetch_job(dispatch.job_id(run_id))
    assert job is not None and rq_queue.job_ids == [job.id] == [f"nrllm-run-{run_id}-0"]
    assert job.func_name == "nrllm_agents.jobs.execute_run"  # its stable name on the queue (rq_queue.JOB_FUNCTION)
    assert job.args == (str(run_id),) and job.kwargs == {}
    # Passed explicitly: never RQ's 180 s nor the queue's DEFAULT_TIMEOUT.
    assert job.timeout == 3600


@pytest.mark.django_db
@pytest.mark.parametrize("configured, expected", [(7200, 7200), ("900", 900), (-1, -1)])
def test_the_job_timeout_is_configurable(
    runtime, rq_queue, settings, django_capture_on_commit_callbacks, configured, expected
):
    settings.NRLLM_AGENTS = {"JOB_TIMEOUT": configured}
    with django_capture_on_commit_callbacks(execute=True):
        run_id = runtime.enqueue(REQUEST)
    assert rq_queue.fetch_job(dispatch.job_id(run_id)).timeout == expected


@pytest.mark.django_db
@pytest.mark.parametrize("configured", [0, -5, 1.5, "soon", True, None])
def test_a_bad_job_timeout_fails_closed(runtime, rq_queue, settings, django_capture_on_commit_callbacks, configured):
    settings.NRLLM_AGENTS = {"JOB_TIMEOUT": configured}
    with django_capture_on_commit_callbacks(execute=True):
        run_id = runtime.enqueue(REQUEST)
    run = AgentRun.objects.get(pk=run_id)
    assert (run.status, run.termination_reason) == (RunStatus.FAILED, "enqueue_failed")
    assert run.error_class == "ImproperlyConfigured" and "JOB_TIMEOUT" in run.error_message
    assert rq_queue.count == 0


def test_the_job_timeout_comes_from_the_environment(child_env):
    """``NRLLM_JOB_TIMEOUT`` configures a deployment without touching settings."""
    proc = manage(
        "shell",
        "-c",
        "from nrllm_agents.executors.rq_queue import job_timeout; print(job_timeout())",
        env={**child_env, "NRLLM_JOB_TIMEOUT": "5400"},
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert out.strip().splitlines()[-1] == "5400"


# Real commits are needed: the dispatch is an on_commit hook of the caller's transaction.
@pytest.mark.django_db(transaction=True)
def test_enqueue_inside_atomic_dispatches_only_after_commit(runtime, rq_queue):
    with transaction.atomic():
        run_id = runtime.enqueue(REQUEST)
        assert rq_queue.count == 0 and rq_queue.fetch_job(dispatch.job_id(run_id)) is None
    assert rq_queue.job_ids == [dispatch.job_id(run_id)]

    with pytest.raises(ZeroDivisionError), transaction.atomic():
        rolled_back = runtime.enqueue(REQUEST)
        raise ZeroDivisionError  # anything that rolls the transaction back
    assert not AgentRun.objects.filter(pk=rolled_back).exists()
    assert rq_queue.fetch_job(dispatch.job_id(rolled_back)) is None and rq_queue.count == 1


@pytest.fixture
def unreachable_redis(settings, redis_url) -> str:
    """REDIS_URL at a closed port, with a password that must never show up anywhere."""
    secret = "s3cret-do-not-log"
    url = f"redis://:{secret}@127.0.0.1:{closed_port()}/12"
    settings.REDIS_URL = url
    settings.RQ_QUEUES = {"default": {"URL": url}}
    return secret


def assert_left_queued(run_id: Any, secret: str) -> None:
    """Issue 20 item 14: an outage never fails a run; it stays a queued, durable row."""
    run = AgentRun.objects.get(pk=run_id)
    assert (run.status, run.termination_reason, run.finished_at) == (RunStatus.QUEUED, "", None)
    assert run.request_payload and run.prompt == REQUEST["prompt"]  # what a worker rehydrates is kept
    assert secret not in run.error_message


# Real commits: the dispatch is the on-commit hook of the row's creation.
@pytest.mark.django_db(transaction=True)
def test_unreachable_redis_at_enqueue_leaves_the_run_queued_and_says_so(runtime, unreachable_redis, caplog):
    with caplog.at_level(logging.DEBUG):
        submitted = runtime.submit(REQUEST)
    assert (submitted.outcome, submitted.status) == (Outcome.WAITING_FOR_QUEUE, RunStatus.QUEUED)
    assert_left_queued(submitted.run_id, unreachable_redis)
    assert f"run {submitted.run_id}: the queue is unreachable (QueueUnavailable)" in caplog.text
    assert unreachable_redis not in caplog.text
    assert "once the queue is back" in queued_wording(submitted.outcome).sentence(submitted.run_id)


def test_a_run_queued_for_rq_workers_says_a_worker_starts_it(rq_queue):
    assert queued_wording(Outcome.QUEUED).sentence("r") == "Run r queued; a worker starts it."


# Real commits: inside atomic() the dispatch hooks run at COMMIT.
@pytest.mark.django_db(transaction=True)
def test_unreachable_redis_inside_atomic_leaves_every_run_of_the_commit_queued(runtime, unreachable_redis, caplog):
    with caplog.at_level(logging.DEBUG), transaction.atomic():
        first = runtime.enqueue(REQUEST)
        second = runtime.enqueue(REQUEST)
    assert_left_queued(first, unreachable_redis)
    assert_left_queued(second, unreachable_redis)
    assert f"run {first}: the queue is unreachable" in caplog.text and f"run {second}: the queue" in caplog.text
    assert unreachable_redis not in caplog.text


# --- the claim -------------------------------------------------------------------------------
@pytest.mark.django_db
def test_losing_claims_do_nothing(runtime, journal):
    cancelled = queued_row(REQUEST)
    assert runtime.cancel(cancelled.pk, source=CancelSource.CLI).outcome == "cancelled"
    assert runtime.run_queued(cancelled.pk) is None
    run = AgentRun.objects.get(pk=cancelled.pk)
    assert run.status == RunStatus.CANCELLED and run.started_at is None and run.claimed_by == ""
    assert kinds(cancelled.pk) == ["cancelled"]

    done = queued_row(REQUEST)
    assert runtime.run_queued(done.pk).outcome == Outcome.COMPLETED
    before = shape(done.pk)
    assert runtime.run_queued(done.pk) is None  # a second delivery of a finished run
    assert shape(done.pk) == before

    waiting = runtime.run(NOTE_REQUEST)
    assert runtime.run_queued(waiting.run_id) is None
    assert AgentRun.objects.get(pk=waiting.run_id).status == RunStatus.WAITING_FOR_APPROVAL

    import uuid

    assert runtime.run_queued(uuid.uuid4()) is None
    with pytest.raises(InvalidRunId):
        runtime.run_queued("not-a-run-id")
    assert journal_of(journal, cancelled.pk) == [] and len(journal_of(journal, done.pk)) == 3


@pytest.mark.django_db
def test_a_claim_stamps_the_worker_and_a_lease(runtime):
    run = queued_row(REQUEST)
    steps: list[dict] = []
    seen: list[tuple[str, Any, Any]] = []

    def on_step(step: dict) -> None:
        steps.append(step)
        seen.append(AgentRun.objects.filter(pk=run.pk).values_list("status", "started_at", "lease_expires").get())

    result = runtime.run_queued(run.pk, on_step=on_step)
    assert result.outcome == Outcome.COMPLETED and result.final_text == "42"
    assert all(status == "running" and lease > started for status, started, lease in seen)
    row = AgentRun.objects.get(pk=run.pk)
    assert row.claimed_by.startswith("worker:") and row.started_at is not None and row.lease_expires is None
    assert row.request_payload is None  # settle clears what could re-run it
    assert [s["kind"] for s in steps] == kinds(run.pk) == ["request", "llm", "tool", "request", "llm"]


@pytest.mark.django_db
def test_a_request_that_cannot_be_rehydrated_settles_failed(runtime):
    bad = queued_row(REQUEST)
    AgentRun.objects.filter(pk=bad.pk).update(request_payload={"prompt": "", "tools": ["nope"]})  # corrupt it
    result = runtime.run_queued(bad.pk)
    assert result.outcome == Outcome.FAILED
    row = AgentRun.objects.get(pk=bad.pk)
    assert (row.status, row.termination_reason, row.error_class) == ("failed", "invalid_request", "InvalidRequest")

    resume = queued_row(REQUEST)
    AgentRun.objects.filter(pk=resume.pk).update(request_payload={"resume": {"approved": True}})  # no state
    result = runtime.run_queued(resume.pk)
    assert result.outcome == Outcome.FAILED
    assert AgentRun.objects.get(pk=resume.pk).termination_reason == "invalid_request"
    assert not AgentRun.objects.filter(status__in=[RunStatus.RUNNING, RunStatus.QUEUED]).exists()


# Real threads, each on its own connection: they must see each other's commits.
@pytest.mark.django_db(transaction=True)
def test_run_queued_hammered_from_threads_exactly_one_executes(runtime, journal):
    rounds, claimers = (100, 4) if is_postgres() else (25, 3)  # the concurrency claim is PostgreSQL's
    request = {"prompt": "once", "tools": [], "script": [{"content": "only once"}]}
    for _ in range(rounds):
        run = queued_row(request)
        barrier = threading.Barrier(claimers)
        results: list[Any] = [None] * claimers

        def claim(i: int) -> None:
            try:
                barrier.wait(10)
                results[i] = runtime.run_queued(run.pk)
            except BaseException as exc:  # asserted on below
                results[i] = exc
            finally:
                connection.close()

        threads = [threading.Thread(target=claim, args=(i,)) for i in range(claimers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(isinstance(r, BaseException) for r in results), results
        winners = [r for r in results if r is not None]
        assert len(winners) == 1 and winners[0].outcome == Outcome.COMPLETED
        assert kinds(run.pk) == ["request", "llm"]
        assert [line["what"] for line in journal_of(journal, run.pk)] == ["model"]


# --- approval through the queue --------------------------------------------------------------
# Real commits: the job function closes the connection it used, as a worker must.
@pytest.mark.django_db(transaction=True)
def test_approve_queued_gets_a_job_of_its_own(runtime, rq_queue):
    run_id = runtime.enqueue(NOTE_REQUEST)
    start_job = dispatch.job_id(run_id)
    assert jobs.execute_run(str(run_id)) == "awaiting_approval"  # what the worker's job does

    result = runtime.approve(run_id, True, queued=True)
    assert (result.outcome, result.status) == (Outcome.QUEUED, RunStatus.QUEUED)
    resume_job = dispatch.job_id(run_id, segment=2)  # request, llm recorded before the decision
    assert rq_queue.job_ids == [start_job, resume_job]
    assert rq_queue.fetch_job(resume_job).args == (str(run_id),)

    assert jobs.execute_run(str(run_id)) == "completed"
    assert jobs.execute_run(str(run_id)) is None  # the start job delivered again: nothing happens
    assert kinds(run_id) == ["request", "llm", "approval", "tool", "request", "llm"]
    assert Note.objects.filter(run_id=run_id).count() == 1


# --- the in-process executor (no REDIS_URL) --------------------------------------------------
# Every test here needs transaction=True: the executor's threads use their own connections.
@pytest.mark.django_db(transaction=True)
def test_without_redis_enqueue_runs_in_process_through_the_claim(runtime, no_redis, journal):
    run_id = runtime.enqueue(REQUEST)
    assert waits.wait_local_idle(30)
    row = AgentRun.objects.get(pk=run_id)
    assert (row.status, row.final_text) == (RunStatus.COMPLETED, "42")
    assert row.claimed_by.startswith("worker:")  # claimed by run_queued, like an RQ worker
    interactive = runtime.run(REQUEST)
    assert shape(run_id) == shape(interactive.run_id)
    assert [line["what"] for line in journal_of(journal, run_id)] == ["model", "tool", "model"]


# Real commits: the executor's threads use their own connections.
@pytest.mark.django_db(transaction=True)
def test_the_local_executor_executes_in_process_even_with_redis_set(runtime, rq_queue, settings, journal):
    settings.NRLLM_AGENTS = {"EXECUTOR": "local"}
    run_id = runtime.enqueue(REQUEST)
    assert waits.wait_local_idle(30)
    row = AgentRun.objects.get(pk=run_id)
    assert (row.status, row.final_text) == (RunStatus.COMPLETED, "42")
    assert rq_queue.count == 0 and rq_queue.fetch_job(dispatch.job_id(run_id)) is None  # Redis never saw it
    assert [line["what"] for line in journal_of(journal, run_id)] == ["model", "tool", "model"]


@pytest.mark.django_db
@pytest.mark.parametrize("executor", ["rq", "auto"])
def test_the_rq_executor_hands_the_run_to_redis(
    runtime, rq_queue, settings, executor, django_capture_on_commit_callbacks
):
    settings.NRLLM_AGENTS = {"EXECUTOR": executor}
    with django_capture_on_commit_callbacks(execute=True):
        run_id = runtime.enqueue(REQUEST)
    assert rq_queue.job_ids == [dispatch.job_id(run_id)]
    assert not executors.LOCAL.holds(str(run_id), job_id=dispatch.job_id(run_id), stale_after=0)
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.QUEUED  # no worker here: it waits


@pytest.mark.django_db(transaction=True)
def test_without_redis_a_run_cancelled_before_commit_never_executes(runtime, no_redis, journal):
    with transaction.atomic():
        run_id = runtime.enqueue(REQUEST)
        runtime.cancel(run_id, source=CancelSource.API, reason="changed my mind")
    assert waits.wait_local_idle(30)  # the executor got the job after COMMIT; its claim lost
    row = AgentRun.objects.get(pk=run_id)
    assert row.status == RunStatus.CANCELLED and row.started_at is None
    assert kinds(run_id) == ["cancelled"] and journal_of(journal, run_id) == []


@pytest.mark.django_db(transaction=True)
def test_without_redis_a_queued_approval_resumes_in_process(runtime, no_redis):
    run_id = runtime.enqueue(NOTE_REQUEST)
    assert waits.wait_local_idle(30)
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.WAITING_FOR_APPROVAL
    assert runtime.approve(run_id, True, queued=True).outcome == Outcome.QUEUED
    assert waits.wait_local_idle(30)
    row = AgentRun.objects.get(pk=run_id)
    assert (row.status, row.final_text) == (RunStatus.COMPLETED, "saved")
    assert Note.objects.filter(run_id=run_id).count() == 1

    cancelled = runtime.enqueue(NOTE_REQUEST)
    assert waits.wait_local_idle(30)
    runtime.cancel(cancelled, source=CancelSource.CLI)
    for queued in (True, False):
        with pytest.raises(ApprovalNotPending, match="is cancelled, not waiting for approval"):
            runtime.approve(cancelled, True, queued=queued)
    assert kinds(cancelled)[-1] == "cancelled" and not Note.objects.filter(run_id=cancelled).exists()


# --- the queued sweep and a job being dequeued ------------------------------------------------
@pytest.mark.django_db
def test_a_job_a_worker_has_just_popped_is_live_for_the_sweep(runtime, rq_queue, django_capture_on_commit_callbacks):
    """Issue 20 item 15: between RQ's pop (``BLMOVE`` into its intermediate list) and the start
    of the job, ``holds`` found it neither queued nor started, deleted it and dispatched the run
    again. Here the pop is RQ's own dequeue; the worker's next step never comes."""
    from rq import Queue

    with django_capture_on_commit_callbacks(execute=True):
        run_id = runtime.enqueue(REQUEST)
    job_id = dispatch.job_id(run_id)
    job, _ = Queue.dequeue_any([rq_queue], None, connection=rq_queue.connection)
    assert job.id == job_id and rq_queue.count == 0  # popped: no longer in the queue's list
    assert executors.RQ.holds(str(run_id), job_id=job_id, stale_after=300)
    assert rq_queue.fetch_job(job_id) is not None  # and not deleted
    assert recovery.sweep_queued(older_than=0).recovered == []
