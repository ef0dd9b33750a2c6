"""Issue 9 findings 5 and 5b: queued runs whose job is gone are recovered, and none runs twice.

Guards:
- finding 5: after Redis lost its data (FLUSHDB here), 39 of 39 queued runs stayed ``queued``
  forever and ``agent_reap`` did nothing for them;
- finding 5b: a database outage while workers held queued jobs failed those jobs for good
  (``claim_queued`` raised ``OperationalError``; RQ did not retry), stranding their runs.

Real ``rqworker`` processes, a real ``agent_reap`` child, the test Redis db. The outage is
simulated for the workers alone: they reach PostgreSQL through a TCP proxy that this test
cuts and restores (the shared server is never touched). Every model call and tool start is
journalled with its run id (``NRLLM_CALL_JOURNAL``): each run must have called its model and
its tool exactly once.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from nrllm_agents.executors import CLAIM_RETRY_DELAYS, dispatch
from nrllm_agents.models import AgentRun, RunStatus
from tests.conftest import manage
from tests.e2e.processes import Workers, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPT = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "6 * 7"}}]}, {"content": "42"}]
REQUEST = {"prompt": "recover me", "tools": ["calculator"], "script": SCRIPT}


@pytest.fixture
def start_workers(tmp_path) -> Callable[..., Workers]:
    started: list[Workers] = []

    def start(env: dict[str, str], count: int = 2) -> Workers:
        workers = Workers(env, count=count, log_dir=tmp_path / "worker-logs", extra_args=("--with-scheduler",))
        started.append(workers)
        return workers.start()

    yield start
    for workers in started:
        workers.stop()


def agent_reap(env: dict[str, str], *args: str, stale: str = "0") -> str:
    proc = manage("agent_reap", *args, env={**env, "NRLLM_QUEUED_STALE_SECONDS": stale})
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, (out, err)
    return out


def calls_per_run(env: dict[str, str]) -> dict[str, list[str]]:
    path = Path(env["NRLLM_CALL_JOURNAL"])
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []
    found: dict[str, list[str]] = {}
    for line in lines:
        found.setdefault(line["run_id"], []).append(line["what"])
    return found


def assert_each_ran_exactly_once(env: dict[str, str], run_ids: list[Any]) -> None:
    wait_for(
        lambda: AgentRun.objects.filter(pk__in=run_ids, status=RunStatus.COMPLETED).count() == len(run_ids),
        timeout=120,
        what="every run to complete",
    )
    calls = calls_per_run(env)
    assert {str(r): sorted(calls.get(str(r), [])) for r in run_ids} == {
        str(r): ["model", "model", "tool"] for r in run_ids
    }


def test_runs_whose_jobs_vanished_are_recovered_by_the_reaper_and_run_once(
    runtime, queue, worker_env, start_workers, redis_url
):
    run_ids = [runtime.enqueue(REQUEST) for _ in range(12)]
    assert len(queue) == 12

    # With their jobs in the queue, stale runs are only waiting: nothing is dispatched twice.
    assert "queued runs: 0 recovered (no job), 12 still waiting for a worker" in agent_reap(worker_env)
    assert len(queue) == 12

    redis.Redis.from_url(redis_url).flushdb()  # Redis restarted without persistence
    assert len(queue) == 0
    assert "queued runs: 12 would recover (no job)" in agent_reap(worker_env, "--dry-run")
    assert len(queue) == 0
    # Younger than NRLLM_QUEUED_STALE_SECONDS: left alone (their job may just be slow to come).
    assert "queued runs: 0 recovered (no job), 0 still waiting" in agent_reap(worker_env, stale="300")
    assert "queued runs: 12 recovered (no job), 0 still waiting" in agent_reap(worker_env)
    assert len(queue) == 12

    start_workers(worker_env)
    assert_each_ran_exactly_once(worker_env, run_ids)
    assert "queued runs: 0 recovered" in agent_reap(worker_env)


class Proxy:
    """A TCP proxy to PostgreSQL for the workers alone; ``cut()`` drops every connection and
    refuses new ones (an outage as the workers see it), ``restore()`` lets them through again."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.up = threading.Event()
        self.up.set()
        self.sockets: set[socket.socket] = set()
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.up.is_set():
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.sockets.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        self.up.clear()
        with self.lock:
            for s in self.sockets:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self.sockets.clear()

    def restore(self) -> None:
        self.up.set()

    def close(self) -> None:
        self.closed = True
        self.cut()
        self.listener.close()


@pytest.mark.postgres_only  # a PostgreSQL outage through a TCP proxy; SQLite is a file, not a server
def test_jobs_claimed_while_the_database_is_away_are_retried_and_run_once(
    runtime, queue, worker_env, start_workers, settings
):
    db = settings.DATABASES["default"]
    proxy = Proxy((db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)))
    try:
        env = {
            **worker_env,
            "DATABASE_URL": f"postgres://{db['USER'] or 'postgres'}@127.0.0.1:{proxy.port}/{db['NAME']}",
        }
        run_ids = [runtime.enqueue(REQUEST) for _ in range(8)]
        jobs = [dispatch.job_id(r) for r in run_ids]
        proxy.cut()
        workers = start_workers(env)

        from rq.job import Job

        def tried_once() -> bool:  # every job failed its claim at least once and was kept for a retry
            return all(Job.fetch(j, connection=queue.connection).retries_left < len(CLAIM_RETRY_DELAYS) for j in jobs)

        wait_for(tried_once, timeout=120, interval=0.2, what="every job to meet the outage")
        assert AgentRun.objects.filter(pk__in=run_ids, status=RunStatus.QUEUED).count() == len(run_ids)
        assert calls_per_run(env) == {}
        assert "database unreachable (OperationalError)" in "\n".join(workers.log_text(n) for n in workers.names)

        proxy.restore()
        assert_each_ran_exactly_once(env, run_ids)
    finally:
        proxy.close()
