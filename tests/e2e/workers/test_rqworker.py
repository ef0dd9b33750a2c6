"""Queued runs executed by real ``manage.py rqworker`` processes, cancelled from other processes.

Every test needs ``transaction=True``: worker and ``agent_cancel`` processes read and write the
test database over their own connections, so every row must be committed. Redis is the test
db (``redis_url``); workers get it as ``REDIS_URL`` and write the call journal (one line per
model call and tool start, with the run id) named by ``NRLLM_CALL_JOURNAL``.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nrllm_agents.executors import dispatch
from nrllm_agents.executors.rq_queue import JOB_FUNCTION
from nrllm_agents.models import TERMINAL, AgentRun, AgentRunEvent, CancelSource, Note, RunStatus
from nrllm_agents.presentation.presenters import stream_finished
from nrllm_agents.runtime.agent_runtime import ApprovalNotPending, CancelOutcome, Outcome
from tests.conftest import manage
from tests.e2e.processes import FROZEN, Canceller, Workers, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

D = 0.1  # seconds of scripted model latency per turn (and of each sleep tool call)


def calc(expr: str) -> dict[str, Any]:
    return {"name": "calculator", "arguments": {"expression": expr}}


SLEEP = {"name": "sleep", "arguments": {"seconds": D}}
NOW = {"name": "current_time", "arguments": {}}
TOOLS = ["calculator", "sleep", "current_time"]
LONG = {
    "prompt": "long",
    "tools": TOOLS,
    "script": [
        {"delay": D, "tool_calls": [calc("1 + 1")]},
        {"delay": D, "tool_calls": [SLEEP]},
        {"delay": D, "tool_calls": [NOW, calc("2 * 3")]},
        {"delay": D, "content": "done"},
    ],
}
SHORT = {
    "prompt": "short",
    "tools": TOOLS,
    "script": [
        {"delay": D, "tool_calls": [SLEEP, calc("7 - 2")]},
        {"delay": D, "content": "ok"},
    ],
}
NOTE = {
    "prompt": "note",
    "tools": ["write_note"],
    "script": [
        {"tool_calls": [{"name": "write_note", "arguments": {"title": "from a worker", "body": "b"}}]},
        {"content": "saved"},
    ],
}


# --- fixtures and helpers --------------------------------------------------------------------
@pytest.fixture
def start_workers(worker_env, tmp_path) -> Callable[..., Workers]:
    """Start real rqworker processes; every one of them is stopped after the test."""
    started: list[Workers] = []

    def start(count: int = 1) -> Workers:
        workers = Workers(worker_env, count=count, log_dir=tmp_path / "worker-logs")
        started.append(workers)
        return workers.start()

    yield start
    for workers in started:
        workers.stop()


def journal(env: dict[str, str], run_id: Any) -> list[dict[str, Any]]:
    path = Path(env["NRLLM_CALL_JOURNAL"])
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [line for line in lines if line.get("run_id") == str(run_id)]


def events(run_id: Any) -> list[AgentRunEvent]:
    return list(AgentRunEvent.objects.filter(run_id=run_id).order_by("sequence"))


def shape(run_id: Any) -> list[tuple[str, int]]:
    return [(e.kind, e.round) for e in events(run_id)]


def finished(run_id: Any) -> bool:
    return stream_finished(AgentRun.objects.get(pk=run_id))


def results_of(queue: Any, job_id: str) -> list[Any]:
    from rq.results import Result

    job = queue.fetch_job(job_id)
    return [] if job is None else [r.return_value for r in Result.all(job)]


def assert_starts_match_steps(env: dict[str, str], run_id: Any) -> list[AgentRunEvent]:
    """Every model call and tool start the worker journaled has its recorded step, in order.

    Returns the recorded steps. Nothing started that the stream does not show.
    """
    steps = [e for e in events(run_id) if e.kind in ("llm", "tool")]
    starts = journal(env, run_id)
    assert [s["what"] for s in starts] == ["model" if e.kind == "llm" else "tool" for e in steps], run_id
    assert [s["name"] for s in starts if s["what"] == "tool"] == [e.payload["name"] for e in steps if e.kind == "tool"]
    return steps


# --- a queued run cancelled before any worker gets it ----------------------------------------
@pytest.mark.sqlite  # the SQLite tier's smoke of this surface
def test_a_run_cancelled_while_queued_never_executes(runtime, queue, start_workers, worker_env):
    run_id = runtime.enqueue(LONG)
    job_id = dispatch.job_id(run_id)
    assert queue.job_ids == [job_id]  # the job waits in Redis: no worker yet
    assert runtime.cancel(run_id, source=CancelSource.CLI).outcome == CancelOutcome.CANCELLED

    workers = start_workers(1)  # the job is delivered after the cancel
    assert wait_for(lambda: results_of(queue, job_id), what="the job to be executed") == [None]
    run = AgentRun.objects.get(pk=run_id)
    assert run.status == RunStatus.CANCELLED and run.started_at is None and run.claimed_by == ""
    assert [e.kind for e in events(run_id)] == ["cancelled"]
    assert journal(worker_env, run_id) == []
    # its horses inherit a frozen heap: no full collection pauses their step (workers/heap.py)
    assert FROZEN.search(workers.log_text(workers.names[0]))


# --- duplicate deliveries and racing workers -------------------------------------------------
def test_the_same_job_delivered_twice_to_racing_workers_executes_once(runtime, queue, start_workers, worker_env):
    start_workers(2)
    run_id = runtime.enqueue(SHORT)
    job_id = dispatch.job_id(run_id)
    queue.push_job_id(job_id)  # the same job delivered a second time
    other = queue.enqueue(JOB_FUNCTION, str(run_id), job_id=f"another-{run_id}").id  # a stray job

    wait_for(
        lambda: len(results_of(queue, job_id)) == 2 and results_of(queue, other), what="three deliveries to finish"
    )
    outcomes = results_of(queue, job_id) + results_of(queue, other)
    assert sorted(outcomes, key=str) == [None, None, "completed"]
    reference = runtime.run(SHORT)
    assert shape(run_id) == shape(reference.run_id)
    assert [e.kind for e in assert_starts_match_steps(worker_env, run_id)] == ["llm", "tool", "tool", "llm"]


# --- the acceptance load ---------------------------------------------------------------------
RUNS = 50
WORKERS = 3
FRESH_CANCELS = 5  # separate `manage.py agent_cancel` processes, ids chosen when each is spawned
PROMPT_CANCELS = 16  # cancels at a chosen moment from two already started agent_cancel processes


class Cancels:
    """What was asked to cancel which run, and when the cancel had certainly committed."""

    def __init__(self) -> None:
        self.by_run: dict[str, dict[str, Any]] = {}  # run id -> {"outcome", "previous", "after"}
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.processes: list[tuple[str, int, str, str, float]] = []  # fresh: id, exit code, out, err, exit time

    def record(self, answer: dict[str, Any], after: float) -> None:
        with self.lock:
            for line in answer["results"]:
                self.by_run[line["run_id"]] = {
                    "outcome": line["outcome"],
                    "previous": line["previous_status"],
                    "after": after,
                }

    def fresh(self, run_id: str, env: dict[str, str]) -> None:
        """Cancel from a new ``manage.py agent_cancel`` process; returns at once."""

        def wait() -> None:
            proc = manage("agent_cancel", "--json", run_id, env=env)
            out, err = proc.communicate(timeout=120)
            with self.lock:
                self.processes.append((run_id, proc.returncode, out, err, time.time()))

        thread = threading.Thread(target=wait)
        thread.start()
        self.threads.append(thread)

    def join(self) -> None:
        """Wait for the fresh processes; check their exit codes and record what they did."""
        for thread in self.threads:
            thread.join(180)
        assert len(self.processes) == len(self.threads), "an agent_cancel process did not finish"
        for run_id, code, out, err, after in self.processes:
            lines = [json.loads(x) for x in out.splitlines() if x.strip()]
            assert [line["run_id"] for line in lines] == [run_id], (out, err)
            assert code == (0 if lines[0]["outcome"] in ("cancelled", "already_cancelled") else 1), (code, out)
            self.record({"results": lines}, after)


def test_fifty_queued_runs_cancelled_from_other_processes_at_random_moments(runtime, queue, start_workers, worker_env):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"random seed {seed}")
    cancellers = [Canceller(worker_env), Canceller(worker_env)]
    cancels = Cancels()
    try:
        for canceller in cancellers:
            canceller.start()
        workers = start_workers(WORKERS)
        requests = [rng.choice([LONG, SHORT]) for _ in range(RUNS)]
        run_ids = [str(runtime.enqueue(r)) for r in requests]
        # The last run enqueued is still queued now (50 runs, 3 workers): one cancel surely
        # finds a queued run; the rest land wherever the random moments put them.
        answer = cancellers[0].cancel(run_ids[-1])
        cancels.record(answer, after=answer["t"])
        untargeted = set(run_ids[:-1])
        fresh, prompt = FRESH_CANCELS, PROMPT_CANCELS - 1
        while (fresh or prompt) and untargeted:
            time.sleep(rng.uniform(0, 3 * D))
            statuses = dict(AgentRun.objects.filter(pk__in=untargeted).values_list("pk", "status"))
            active = [str(pk) for pk, s in statuses.items() if s not in TERMINAL]
            if not active:
                break
            if fresh and rng.random() < 0.3:
                victim = rng.choice(active)
                cancels.fresh(victim, worker_env)
                fresh -= 1
            elif prompt:
                running = [str(pk) for pk, s in statuses.items() if s == RunStatus.RUNNING]
                victim = rng.choice(running if running and rng.random() < 0.7 else active)
                canceller = rng.choice(cancellers)
                answer = canceller.cancel(victim)
                cancels.record(answer, after=answer["t"])  # it printed this once the command returned
                prompt -= 1
            else:
                continue
            untargeted.discard(victim)
        cancels.join()
        wait_for(lambda: all(finished(r) for r in run_ids), timeout=180, interval=0.2, what="every run to finish")
    finally:
        for canceller in cancellers:
            canceller.stop()

    from rq import Worker

    busy = [w for w in Worker.all(queue=queue) if w.name in workers.names and w.successful_job_count]
    assert len(busy) >= 2, "the runs were not spread over several worker processes"
    references = {r["prompt"]: shape(runtime.run(r).run_id) for r in (LONG, SHORT)}

    hit = {"queued": 0, "running": 0, "late": 0}
    for run_id, request in zip(run_ids, requests):
        run = AgentRun.objects.get(pk=run_id)
        cancel = cancels.by_run.get(run_id)
        if cancel is None or cancel["outcome"] != CancelOutcome.CANCELLED:
            # Not cancelled (or the cancel came after the end): identical to an interactive run.
            hit["late"] += cancel is not None
            assert run.status == RunStatus.COMPLETED, (run_id, run.status, cancel)
            assert shape(run_id) == references[request["prompt"]]
            assert_starts_match_steps(worker_env, run_id)
            continue
        assert run.status == RunStatus.CANCELLED and run.cancel_source == "cli"
        stream = events(run_id)
        assert [e.kind for e in stream].count("cancelled") == 1 and stream[-1].kind == "cancelled"
        *done, ack = stream
        assert ack.payload["boundary_sequence"] == (done[-1].sequence if done else None)
        assert run.stopped_at is not None and run.stopped_at >= run.cancel_requested_at
        if cancel["previous"] == RunStatus.QUEUED:
            hit["queued"] += 1  # never executed: nothing but the acknowledgement
            assert done == [] and run.started_at is None and journal(worker_env, run_id) == []
            continue
        assert cancel["previous"] == RunStatus.RUNNING, cancel
        hit["running"] += 1
        # The audit stream is complete up to the abort point: a prefix of the full run's stream.
        assert [(e.kind, e.round) for e in done] == references[request["prompt"]][: len(done)]
        # Nothing started after the boundary: every start has its step, and none came later.
        assert_starts_match_steps(worker_env, run_id)
        if not done:  # cancelled between its claim and its first step: nothing started at all
            assert journal(worker_env, run_id) == []
            continue
        boundary = done[-1].created_at.timestamp()
        assert all(s["t"] <= boundary for s in journal(worker_env, run_id))
        # Within one step: once the cancel had certainly committed, at most the step in flight.
        assert sum(e.created_at.timestamp() > cancel["after"] for e in done) <= 1, (run_id, cancel)
        assert sum(s["t"] > cancel["after"] for s in journal(worker_env, run_id)) <= 1
    print(f"cancels that found the run: {hit}")
    assert hit["running"] and hit["queued"], f"the cancels did not hit both queued and running runs: {hit}"
    assert sum(hit.values()) == len(cancels.by_run) and len(cancels.by_run) < RUNS  # some left alone


# --- approval through a worker ---------------------------------------------------------------
def test_a_queued_run_waiting_for_approval_resumes_in_a_worker(runtime, queue, start_workers, worker_env):
    start_workers(1)
    approved, cancelled = runtime.enqueue(NOTE), runtime.enqueue(NOTE)
    for run_id in (approved, cancelled):
        wait_for(
            lambda: AgentRun.objects.get(pk=run_id).status == RunStatus.WAITING_FOR_APPROVAL,
            what="the run to wait for approval",
        )

    result = runtime.approve(approved, True, queued=True)
    # the row as it is when approve returns: the idle worker may have taken the run already
    assert result.outcome == Outcome.QUEUED and result.status in (RunStatus.QUEUED, RunStatus.RUNNING), result
    resume_job = dispatch.job_id(approved, segment=2)
    assert wait_for(lambda: results_of(queue, resume_job), what="the resume job") == ["completed"]
    run = AgentRun.objects.get(pk=approved)
    assert (run.status, run.final_text) == (RunStatus.COMPLETED, "saved")
    assert [e.kind for e in events(approved)] == ["request", "llm", "approval", "tool", "request", "llm"]
    note = Note.objects.get(run_id=approved)
    assert note.title == "from a worker"
    assert [s["what"] for s in journal(worker_env, approved)] == ["model", "tool", "model"]

    assert runtime.cancel(cancelled, source=CancelSource.API).outcome == CancelOutcome.CANCELLED
    for queued in (True, False):
        with pytest.raises(ApprovalNotPending):
            runtime.approve(cancelled, True, queued=queued)
    assert [e.kind for e in events(cancelled)] == ["request", "llm", "cancelled"]
    assert queue.fetch_job(dispatch.job_id(cancelled, segment=2)) is None
    assert not Note.objects.filter(run_id=cancelled).exists()


# --- RQ's job timeout ------------------------------------------------------------------------
def test_a_job_killed_by_its_timeout_leaves_the_run_failed_not_running(runtime, queue, start_workers, settings):
    settings.NRLLM_AGENTS = {"JOB_TIMEOUT": 1}  # stored on the job at enqueue
    start_workers(1)
    run_id = runtime.enqueue(
        {
            "prompt": "slow",
            "tools": ["sleep"],
            "script": [{"tool_calls": [{"name": "sleep", "arguments": {"seconds": 5}}]}, {"content": "never"}],
        }
    )
    assert wait_for(lambda: results_of(queue, dispatch.job_id(run_id)), what="the job to end") == ["failed"]
    run = AgentRun.objects.get(pk=run_id)
    assert (run.status, run.termination_reason) == (RunStatus.FAILED, "tool_failed")
    assert "JobTimeoutException" in run.error_class + run.error_message
    assert [e.kind for e in events(run_id)] == ["request", "llm", "tool"]
