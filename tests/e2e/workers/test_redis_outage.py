"""Issue 20 items 14 and 15: a Redis outage stops no work, and recovery has no holes.

Guards what once broke, each with real ``rqworker`` and ``agent_worker`` processes on a
redis-server of the test's own (a free port; never the shared one), which it stops and starts:

- while Redis was down, runs were settled ``failed/enqueue_failed`` though each was a durable
  row; ``rqworker`` exited from its horse monitor (``set_current_job_working_time``) and
  ``agent_worker`` from ``set_state`` (rc 1, "Redis is unreachable"), so the queued runs waited
  for someone to start a worker by hand;
- a busy worker (an ``rqworker`` in a job, an ``agent_worker`` with no free slot) ran no
  maintenance, so a dead peer's run waited for the end of that job instead of a lease and a
  maintenance interval;
- the queued sweep took a job that a worker was dequeuing at that moment for gone, and
  dispatched its run again.

No supervisor runs here: a worker that exits fails the test.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from nrllm_agents.executors import recovery
from nrllm_agents.executors.dispatch import EnqueueError
from nrllm_agents.models import TERMINAL, AgentRun, RunStatus
from tests.conftest import race_rounds
from tests.e2e.processes import Workers, wait_for
from tests.e2e.workers.test_supervision import free_port, start_redis

pytestmark = pytest.mark.django_db(transaction=True)  # workers in other processes read our commits

OUTAGE_SECONDS = 3  # a 3 s stop proves what a 10 s one did: every path (refused enqueue, lost job, reconnect) is taken
QUICK = {"prompt": "burst", "script": [{"content": "ok"}], "tools": []}
KINDS = {
    "rqworker": ("rqworker", ()),
    "agent_worker": ("agent_worker", ("--concurrency", "4")),
}


def steps(rounds: int, seconds: float) -> dict[str, Any]:
    """A queued run of ``rounds`` model turns, each followed by a ``sleep`` tool of ``seconds``."""
    turn = {"delay": 0.2, "tool_calls": [{"name": "sleep", "arguments": {"seconds": seconds}}]}
    script = [turn] * rounds + [{"content": "done"}]
    return {"prompt": "outage", "script": script, "tools": ["sleep"], "max_iterations": rounds + 1}


class OwnRedis:
    """A redis-server on a free port, without persistence: stopped, it comes back empty."""

    def __init__(self, tmp_path: Path) -> None:
        self.port, self.tmp_path = free_port(), tmp_path
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.server: subprocess.Popen[bytes] | None = start_redis(self.port, tmp_path)

    def stop(self) -> None:
        if self.server is not None:
            self.server.terminate()
            self.server.wait(10)
            self.server = None

    def start(self) -> None:
        self.server = start_redis(self.port, self.tmp_path)


@pytest.fixture
def own_redis(tmp_path, settings):
    redis_server = OwnRedis(tmp_path)
    settings.REDIS_URL = redis_server.url  # this process dispatches to it too
    settings.RQ_QUEUES = {"default": {"URL": redis_server.url}}
    yield redis_server
    redis_server.stop()


def statuses(run_ids: list[Any]) -> dict[str, tuple[str, str]]:
    rows = AgentRun.objects.filter(pk__in=run_ids).values_list("pk", "status", "termination_reason")
    return {str(pk): (status, reason) for pk, status, reason in rows}


def all_terminal(run_ids: list[Any]) -> bool:
    return all(status in TERMINAL for status, _ in statuses(run_ids).values())


def assert_alive(workers: Workers) -> None:
    exited = [(name, p.returncode) for name, p in zip(workers.names, workers.processes) if p.poll() is not None]
    assert not exited, f"worker processes exited: {exited}\n{workers.logs()}"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_redis_outage_while_runs_are_submitted_and_executing_stops_nothing(
    kind, own_redis, child_env, runtime, tmp_path
):
    command, extra = KINDS[kind]
    env = {
        **child_env,
        "REDIS_URL": own_redis.url,
        "NRLLM_MAINTENANCE_SECONDS": "1",  # the queued sweep picks up what Redis forgot
        "NRLLM_QUEUED_STALE_SECONDS": "2",
    }
    with Workers(env, count=2, log_dir=tmp_path / "logs", command=command, extra_args=extra) as workers:
        before = [runtime.enqueue(steps(2, 0.5)) for _ in range(2)]  # one per worker, ending within the outage
        wait_for(
            lambda: AgentRun.objects.filter(pk__in=before, status=RunStatus.RUNNING).count() >= 2,
            timeout=60,
            what="runs executing before the outage",
        )
        own_redis.stop()
        during: list[Any] = []
        ends = time.monotonic() + OUTAGE_SECONDS
        while time.monotonic() < ends:  # submitted while Redis is down: they wait as queued rows
            try:
                during.append(runtime.enqueue(steps(2, 0.5)))
            except EnqueueError as exc:  # what it once did: the run settled failed/enqueue_failed
                during.append(exc.run_id)
            time.sleep(1)
        assert_alive(workers)  # nobody exited while Redis was down
        assert statuses(during) == {str(run_id): (RunStatus.QUEUED, "") for run_id in during}  # waiting rows
        own_redis.start()
        after = [runtime.enqueue(steps(2, 0.5)) for _ in range(3)]
        everything = before + during + after
        try:
            wait_for(lambda: all_terminal(everything), timeout=180, what="every run to end")
        except AssertionError:
            raise AssertionError(f"{statuses(everything)}\n{workers.logs()}") from None
        ended = statuses(everything)
        assert all(result == (RunStatus.COMPLETED, "completed") for result in ended.values()), ended
        assert_alive(workers)
        assert "Redis is back" in "".join(workers.log_text(name) for name in workers.names)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_worker_started_while_redis_is_down_waits_for_it(kind, own_redis, child_env, runtime, tmp_path):
    command, extra = KINDS[kind]
    env = {**child_env, "REDIS_URL": own_redis.url, "NRLLM_MAINTENANCE_SECONDS": "1", "NRLLM_QUEUED_STALE_SECONDS": "1"}
    own_redis.stop()
    run_id = runtime.enqueue(QUICK)  # waits as a queued row
    back = threading.Timer(5, own_redis.start)  # Redis comes back while the worker waits for it
    back.start()
    workers = Workers(env, count=1, log_dir=tmp_path / "logs", command=command, extra_args=extra)
    try:
        workers.start(timeout=90)  # fails if the process exits meanwhile
        wait_for(lambda: all_terminal([run_id]), timeout=60, what="the run queued during the outage")
        assert statuses([run_id]) == {str(run_id): (RunStatus.COMPLETED, "completed")}
        assert_alive(workers)
    finally:
        back.join()
        workers.stop()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_busy_worker_reaps_a_dead_peer_s_run_within_a_lease_and_an_interval(
    kind, own_redis, child_env, runtime, tmp_path
):
    command, _ = KINDS[kind]
    slots = ("--concurrency", "1") if command == "agent_worker" else ()  # busy = no free slot
    env = {**child_env, "REDIS_URL": own_redis.url, "NRLLM_LEASE_SECONDS": "2", "NRLLM_MAINTENANCE_SECONDS": "1"}
    busy = Workers(env, count=1, log_dir=tmp_path / "busy", command=command, extra_args=slots).start()
    peer = Workers(env, count=1, log_dir=tmp_path / "peer", command=command, extra_args=slots)
    try:
        long_run = runtime.enqueue(steps(40, 0.8))  # ~40 s of short steps: renewed at each boundary
        wait_for(lambda: AgentRun.objects.get(pk=long_run).status == RunStatus.RUNNING, timeout=60, what="busy")
        peer.start()
        victim = runtime.enqueue(steps(40, 0.8))  # only the peer has a free slot
        wait_for(lambda: AgentRun.objects.get(pk=victim).status == RunStatus.RUNNING, timeout=60, what="the peer")
        peer.kill(0)
        killed_at = time.monotonic()
        wait_for(
            lambda: AgentRun.objects.filter(pk=victim, attempts=1).exists(),
            timeout=60,
            what="the dead peer's run to be reaped",
        )
        waited = time.monotonic() - killed_at
        # The documented bound is a lease (2 s) plus a maintenance interval (1 s); before, the
        # run waited for the end of the busy worker's ~40 s job.
        assert waited < 10, f"reaped {waited:.1f} s after the kill\n{busy.logs()}"
        assert AgentRun.objects.get(pk=long_run).status == RunStatus.RUNNING  # the busy worker was busy
        assert_alive(busy)
    finally:
        peer.stop()
        busy.stop()


def test_the_queued_sweep_never_redispatches_a_job_being_dequeued(own_redis, child_env, runtime, tmp_path):
    """Bursts of runs drain through real workers of both kinds while the sweep looks at every
    queued run again and again: it must find each one's job somewhere, every time."""
    env = {**child_env, "REDIS_URL": own_redis.url}
    forking = Workers(env, count=2, log_dir=tmp_path / "rq", command="rqworker")
    threaded = Workers(
        env, count=1, log_dir=tmp_path / "agent", command="agent_worker", extra_args=("--concurrency", "8")
    )
    recovered: list[Any] = []
    sweeps = 0
    try:
        forking.start()
        threaded.start()
        for _ in range(race_rounds(3)):
            burst = [
                runtime.enqueue({"prompt": "burst", "script": [{"content": "ok"}], "tools": []}) for _ in range(40)
            ]
            done = threading.Event()

            def sweep_until_done() -> None:
                nonlocal sweeps
                try:
                    while not done.is_set():
                        # 0.3 s: past the instant between a run's commit and its enqueue, which
                        # is not a job being dequeued (the default grace is QUEUED_STALE_SECONDS).
                        report = recovery.sweep_queued(older_than=0.3)
                        assert not report.error, report.error
                        recovered.extend(report.recovered)
                        sweeps += 1
                finally:
                    connections.close_all()

            sweeper = threading.Thread(target=sweep_until_done)
            sweeper.start()
            try:
                wait_for(lambda: all_terminal(burst), timeout=120, what="the burst to drain")
            finally:
                done.set()
                sweeper.join(30)
            assert all(result == (RunStatus.COMPLETED, "completed") for result in statuses(burst).values())
        assert sweeps > 10
        assert recovered == [], f"{len(recovered)} runs dispatched again although their job was live"
    finally:
        forking.stop()
        threaded.stop()
