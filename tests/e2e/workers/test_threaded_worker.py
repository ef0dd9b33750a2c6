"""Hundreds of runs at once in ONE ``manage.py agent_worker`` process, on PostgreSQL.

Every test needs ``transaction=True``: the worker process reads and writes the test database over
its own connections. The worker's connections carry an ``application_name`` of their own
(``PGAPPNAME``), so ``pg_stat_activity`` counts exactly the connections of that process's pool
(its cancel listener names itself ``nrllm-cancel-listener``). Each model call and tool start is
journaled with its run id and pid (``NRLLM_CALL_JOURNAL``).
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, connections

from nrllm_agents.models import AgentRun, AgentRunEvent, CancelSource, RunStatus
from nrllm_agents.presentation.presenters import stream_finished
from tests.conftest import manage
from tests.e2e.processes import Workers, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres_only]

POOL_MAX = 6


def script(rng: random.Random, rounds: int, low: float, high: float) -> list[dict[str, Any]]:
    """``rounds`` model turns of ``low``–``high`` s that each ask for a ``sleep`` as long, then an answer."""
    turns = [
        {
            "delay": round(rng.uniform(low, high), 2),
            "tool_calls": [{"name": "sleep", "arguments": {"seconds": round(rng.uniform(low, high), 2)}}],
        }
        for _ in range(rounds)
    ]
    return turns + [{"delay": round(rng.uniform(low, high), 2), "content": "done"}]


@pytest.fixture
def app_name() -> str:
    return f"nrllm-many-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def worker_env(child_env, redis_url, app_name) -> dict[str, str]:
    return {
        **child_env,
        "REDIS_URL": redis_url,
        "PGAPPNAME": app_name,
        "NRLLM_DB_POOL_MAX": str(POOL_MAX),
        "NRLLM_LEASE_SECONDS": "20",
    }


@pytest.fixture
def start_worker(worker_env, tmp_path) -> Callable[..., Workers]:
    """Start one agent_worker process (``--concurrency``); every one is stopped after the test."""
    started: list[Workers] = []

    def start(concurrency: int, *, env: dict[str, str] | None = None) -> Workers:
        workers = Workers(
            env or worker_env,
            count=1,
            log_dir=tmp_path / f"logs-{len(started)}",
            command="agent_worker",
            extra_args=("--concurrency", str(concurrency)),
        )
        started.append(workers)
        return workers.start()

    yield start
    for workers in started:
        workers.stop()


def enqueue_many(runtime: Any, requests: list[dict[str, Any]]) -> list[str]:
    """Enqueue from 8 threads (each enqueue is a commit and a Redis round trip)."""

    def one(request: dict[str, Any]) -> str:
        try:
            return str(runtime.enqueue(request))
        finally:
            connections.close_all()

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, requests))


class ConnectionSampler:
    """Counts the worker's connections in ``pg_stat_activity`` every 20 ms, on a thread."""

    def __init__(self, app_name: str) -> None:
        self.app_name = app_name
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ConnectionSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                with connection.cursor() as cursor:
                    cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [self.app_name])
                    self.peak = max(self.peak, cursor.fetchone()[0])
                    self.samples += 1
                self._stop.wait(0.02)
        finally:
            connections.close_all()


def running_count(ids: list[str]) -> int:
    return AgentRun.objects.filter(pk__in=ids, status=RunStatus.RUNNING).count()


def all_finished(ids: list[str]) -> bool:
    return all(stream_finished(r) for r in AgentRun.objects.filter(pk__in=ids))


def state(ids: list[str], workers: Workers) -> str:
    """What a failed wait reports: how many runs are in each status, and the worker's log."""
    statuses = Counter(AgentRun.objects.filter(pk__in=ids).values_list("status", flat=True))
    return f"runs by status: {dict(statuses)}\n{workers.logs()}"


def second_finishes(ids: list[str], second: Workers, timeout: float) -> None:
    """Wait for the worker that took the runs over to finish every one; a timeout says why."""
    wait_for(
        lambda: all_finished(ids),
        timeout=timeout,
        interval=0.5,
        what="the second worker to finish every run",
        explain=lambda: state(ids, second),
    )


def journal(env: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    path = Path(env["NRLLM_CALL_JOURNAL"])
    by_run: dict[str, list[dict[str, Any]]] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        entry = json.loads(line)
        by_run.setdefault(entry["run_id"], []).append(entry)
    return by_run


def stream(run_id: str) -> list[AgentRunEvent]:
    return list(AgentRunEvent.objects.filter(run_id=run_id).order_by("sequence"))


def assert_gap_free(run_id: str) -> list[AgentRunEvent]:
    events = stream(run_id)
    assert [e.sequence for e in events] == list(range(len(events))), run_id
    return events


def test_hundreds_of_runs_on_one_worker_process_with_cancels_at_random_moments(
    runtime, queue, start_worker, worker_env, app_name
):
    """300 runs (2–4 s model calls and tools) on one agent_worker: all at once, on at most
    POOL_MAX connections; a random fifth is cancelled mid-run and stops within one step with
    nothing started after its boundary; the others complete; no step runs twice."""
    rng = random.Random()
    runs = 300
    ids = enqueue_many(
        runtime,
        [
            {"prompt": "many", "tools": ["sleep"], "script": script(rng, 2, 2, 4), "max_iterations": 5}
            for _ in range(runs)
        ],
    )
    with ConnectionSampler(app_name) as sampler:
        workers = start_worker(runs)
        peak_running = wait_for(
            lambda: (n := running_count(ids)) >= runs * 0.9 and n,
            timeout=60,
            what="nine in ten runs to execute at once",
        )
        targets = rng.sample(ids, runs // 5)
        cancelled_at: dict[str, float] = {}
        for run_id in targets:  # at random moments while the load runs
            time.sleep(rng.uniform(0, 0.05))
            result = runtime.cancel(run_id, source=CancelSource.SYSTEM, reason="random")
            assert result.outcome.value == "cancelled", result
            cancelled_at[run_id] = time.time()
        wait_for(lambda: all_finished(ids), timeout=240, interval=0.5, what="every run to finish")
    assert sampler.samples > 50
    assert 0 < sampler.peak <= POOL_MAX, sampler.peak
    assert peak_running >= runs * 0.9

    starts = journal(worker_env)
    statuses = Counter()
    for run in AgentRun.objects.filter(pk__in=ids):
        statuses[run.status] += 1
        events = assert_gap_free(str(run.pk))
        mine = starts.get(str(run.pk), [])
        assert len({s["pid"] for s in mine}) <= 1  # one process (none: cancelled before its first call)
        asked = [("model" if e.kind == "llm" else "tool") for e in events if e.kind in ("llm", "tool")]
        assert [s["what"] for s in mine] == asked, (run.pk, mine, asked)  # each call started exactly once
        if str(run.pk) in cancelled_at:
            assert run.status == RunStatus.CANCELLED and run.stopped_at is not None
            assert events[-1].kind == "cancelled"
            after = [e for e in events[:-1] if e.created_at > run.cancel_requested_at]
            assert len(after) <= 1, [(e.kind, e.payload) for e in after]  # within one step: the one in flight
            boundary = events[-2].created_at.timestamp() if len(events) > 1 else 0
            assert not [s for s in mine if s["t"] > boundary + 0.001], (run.pk, mine, boundary)
        else:
            assert run.status == RunStatus.COMPLETED, (run.pk, run.status, run.error_message)
            assert [e.kind for e in events] == ["request", "llm", "tool"] * 2 + ["request", "llm"]
    assert statuses == {RunStatus.COMPLETED: runs - len(targets), RunStatus.CANCELLED: len(targets)}
    assert "Traceback" not in workers.log_text(workers.names[0])


def test_a_fresh_agent_worker_reaps_a_killed_one_s_runs_by_itself(runtime, queue, start_worker, worker_env):
    """No ``agent_reap``: the next agent_worker's own maintenance requeues the killed worker's
    runs once their leases lapse, and finishes them, gap-free, each requeued once.

    The lease exceeds the longest step threefold, as the README asks of a deployment: a step as
    long as the lease lets the new worker's own maintenance reap a live run of its own (a second
    requeue), which is the configuration error, not the behaviour under test."""
    env = {**worker_env, "NRLLM_LEASE_SECONDS": "3"}
    rng = random.Random()
    ids = enqueue_many(
        runtime,
        [
            {"prompt": "kill", "tools": ["sleep"], "script": script(rng, 3, 0.3, 1), "max_iterations": 5}
            for _ in range(20)
        ],
    )
    victim = start_worker(20, env=env)
    wait_for(lambda: running_count(ids) == 20, timeout=60, what="the runs to execute")
    victim.kill(0)
    start_worker(20, env={**env, "NRLLM_MAINTENANCE_SECONDS": "1"})
    wait_for(lambda: all_finished(ids), timeout=120, interval=0.5, what="the new worker to reap and finish every run")
    for run in AgentRun.objects.filter(pk__in=ids):
        assert (run.status, run.attempts) == (RunStatus.COMPLETED, 1), (run.pk, run.status, run.error_message)
        assert_gap_free(str(run.pk))


def test_sigkill_of_the_worker_loses_nothing_the_reaper_requeues_every_run(runtime, queue, start_worker, worker_env):
    """SIGKILL of the whole worker with 200 runs in flight: once their leases lapse, the reaper
    requeues every one, and a second worker completes them, gap-free."""
    env = {**worker_env, "NRLLM_LEASE_SECONDS": "4"}
    rng = random.Random()
    runs = 200
    ids = enqueue_many(
        runtime,
        [
            {"prompt": "kill", "tools": ["sleep"], "script": script(rng, 4, 1, 2), "max_iterations": 6}
            for _ in range(runs)
        ],
    )
    victim = start_worker(runs, env=env)
    wait_for(lambda: running_count(ids) >= runs * 0.9, timeout=60, what="the runs to execute")
    wait_for(
        lambda: AgentRunEvent.objects.filter(run_id__in=ids, kind="tool").count() >= runs // 2,
        timeout=60,
        what="runs to be mid-way",
    )
    victim.kill(0)
    stranded = running_count(ids)
    assert stranded >= runs * 0.9  # the kill left them mid-way; nobody settles for the dead
    before = {str(r): [e.sequence for e in stream(str(r))] for r in ids}

    wait_for(
        lambda: (
            not AgentRun.objects.filter(pk__in=ids, status=RunStatus.RUNNING, lease_expires__gt=time_now()).exists()
        ),
        timeout=30,
        what="every lease to lapse",
    )
    proc = manage("agent_reap", "--limit", "1000", env=env)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and out.startswith(f"{stranded} requeued"), (out, err)
    second_finishes(ids, start_worker(runs, env=env), timeout=180)
    for run in AgentRun.objects.filter(pk__in=ids):
        assert run.status == RunStatus.COMPLETED, (run.pk, run.status, run.error_message)
        events = assert_gap_free(str(run.pk))
        assert [e.sequence for e in events][: len(before[str(run.pk)])] == before[str(run.pk)]
        kinds = [e.kind for e in events]
        # A run killed inside a model call recorded its request step twice (once per segment).
        assert [k for i, k in enumerate(kinds) if not (k == "request" and kinds[i + 1 : i + 2] == ["request"])] == [
            "request",
            "llm",
            "tool",
        ] * 4 + ["request", "llm"], kinds
    assert AgentRun.objects.filter(pk__in=ids, attempts=1).count() == stranded


def test_sigterm_hands_every_run_in_flight_back_and_they_complete_elsewhere(runtime, queue, start_worker, worker_env):
    """SIGTERM during the runs' first model calls: the worker hands all 150 runs back at once (the
    waits end; nothing interrupted is recorded, nothing is cancelled or failed) and exits; a
    second worker completes them, gap-free."""
    runs = 150
    # The first model call is long enough that every run is still inside it when the signal
    # comes, however slowly a loaded machine starts 150 of them (on CI, the first runs to start
    # had ended a 5 s call before the last one began).
    first_turn = {"delay": 20, "tool_calls": [{"name": "sleep", "arguments": {"seconds": 5}}]}
    turn = {"delay": 5, "tool_calls": [{"name": "sleep", "arguments": {"seconds": 5}}]}
    ids = enqueue_many(
        runtime,
        [
            {
                "prompt": "term",
                "tools": ["sleep"],
                "script": [first_turn, turn, {"content": "ok"}],
                "max_iterations": 5,
            }
            for _ in range(runs)
        ],
    )
    first = start_worker(runs)
    wait_for(lambda: running_count(ids) == runs, timeout=60, what="every run to execute")
    time.sleep(1)  # every run is inside its first 20 s model call
    first.terminate(0)
    code = first.wait_exit(0, timeout=15)  # less than one first model call
    assert code == 0, first.logs()
    assert Counter(AgentRun.objects.filter(pk__in=ids).values_list("status", flat=True)) == {RunStatus.QUEUED: runs}
    assert not AgentRunEvent.objects.filter(run_id__in=ids, kind="llm").exists()  # cut short, not recorded
    second_finishes(ids, start_worker(runs), timeout=120)
    for run in AgentRun.objects.filter(pk__in=ids):
        assert (run.status, run.attempts) == (RunStatus.COMPLETED, 0), (run.pk, run.status)
        events = assert_gap_free(str(run.pk))
        assert [e.kind for e in events] == [
            "request",
            "request",
            "llm",
            "tool",
            "request",
            "llm",
            "tool",
            "request",
            "llm",
        ]
        assert not any(e.payload.get("interrupted") for e in events)


def time_now() -> Any:
    from django.utils import timezone

    return timezone.now()


def test_sigterm_during_a_tool_lets_it_end_hands_the_run_back_at_its_boundary_and_claims_nothing(
    runtime, queue, start_worker, worker_env
):
    """Issue 44 item 15: SIGTERM during a 20 s ``sleep`` tool under a 60 s lease. The worker used
    to cut the tool short at once (issue 32 finding 11 asked for a prompt hand-back), and the
    next worker ran it again from its start. Now it drains: the tool runs to its end within the
    grace period, its step is recorded, the run goes back to the queue at that boundary (queued,
    owner and lease released, once), the stopping worker takes no job, and the next worker goes
    on from there: the tool ran once in all.
    """
    env = {**worker_env, "NRLLM_LEASE_SECONDS": "60", "NRLLM_WORKER_DRAIN_SECONDS": "30"}
    ids = enqueue_many(
        runtime,
        [
            {
                "prompt": "term in a tool",
                "tools": ["sleep"],
                "script": [{"tool_calls": [{"name": "sleep", "arguments": {"seconds": 20}}]}, {"content": "ok"}],
            }
        ],
    )
    first = start_worker(4, env=env)
    wait_for(
        lambda: any(e.get("what") == "tool" for e in journal(worker_env).get(ids[0], [])),
        timeout=60,
        what="the sleep tool to start",
    )
    assert AgentRun.objects.get(pk=ids[0]).status == RunStatus.RUNNING
    first.terminate(0)
    code = first.wait_exit(0, timeout=45)  # the tool's end (20 s), then the hand-back: within the grace
    assert code == 0, first.logs()
    run = AgentRun.objects.get(pk=ids[0])
    assert (run.status, run.attempts, run.claimed_by, run.lease_expires) == (RunStatus.QUEUED, 0, "", None)
    tool_step = AgentRunEvent.objects.get(run_id=ids[0], kind="tool")
    assert not tool_step.payload.get("interrupted"), tool_step.payload  # it ran to its end
    log = first.log_text(first.names[0])
    assert "(0 steps cut short)" in log, log
    taken = [line for line in log.splitlines() if f": default: nrllm-run-{ids[0]}-" in line and "in flight" in line]
    assert len(taken) == 1, log  # taken once: the job it handed back is put back, not claimed again
    start_worker(4, env=env)
    wait_for(lambda: all_finished(ids), timeout=60, what="another worker to finish the run")
    assert AgentRun.objects.get(pk=ids[0]).status == RunStatus.COMPLETED
    assert [e["what"] for e in journal(worker_env)[ids[0]]] == ["model", "tool", "model"]  # nothing repeated
    assert [e.kind for e in assert_gap_free(ids[0])] == ["request", "llm", "tool", "request", "llm"]


def test_a_second_sigterm_during_the_drain_exits_at_once(runtime, queue, start_worker, worker_env):
    """The drain waits for the steps in flight; a second SIGTERM does not: the worker exits at
    once and leaves its run to the reaper (running, its lease held)."""
    env = {**worker_env, "NRLLM_LEASE_SECONDS": "60", "NRLLM_WORKER_DRAIN_SECONDS": "30"}
    ids = enqueue_many(
        runtime,
        [
            {
                "prompt": "term twice",
                "tools": ["sleep"],
                "script": [{"tool_calls": [{"name": "sleep", "arguments": {"seconds": 20}}]}, {"content": "ok"}],
            }
        ],
    )
    first = start_worker(4, env=env)
    wait_for(
        lambda: any(e.get("what") == "tool" for e in journal(worker_env).get(ids[0], [])),
        timeout=60,
        what="the sleep tool to start",
    )
    first.terminate(0)
    wait_for(
        lambda: "hand back at their next boundary" in first.log_text(first.names[0]),
        timeout=10,
        what="the drain to begin",
    )
    time.sleep(1.1)  # RQ ignores a second signal within 1 s of the first (its pool sends two)
    signalled = time.monotonic()
    first.terminate(0)
    first.wait_exit(0, timeout=15)
    assert time.monotonic() - signalled < 10, "the second SIGTERM waited for the 20 s tool"
    assert AgentRun.objects.get(pk=ids[0]).status == RunStatus.RUNNING  # the reaper's, once its lease lapses
