"""Issue 9 finding 6, issue 20 item 14: a worker started the documented way comes back by itself.

Guards: a worker that exits for any reason (a crash, an out-of-memory kill; once also a Redis
outage) was started again by nothing, and ``scripts/worker.sh`` restarted ``rqworker`` only,
never ``agent_worker``. ``scripts/worker.sh [rqworker|agent_worker]`` (``make worker
[WORKER=agent_worker]``) starts its worker again after any exit, with backoff. This test runs
its own redis-server on a free port (never the shared one) and restarts it under the loop;
then the worker process is told to exit, and a new one of the same kind must take over and
execute a queued run. SIGTERM to the loop then ends the loop and its worker.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from nrllm_agents.models import AgentRun, RunStatus
from tests.conftest import ROOT
from tests.e2e.processes import _children, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(port: int, tmp_path: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port)
    wait_for(lambda: _pings(client), timeout=30, what="the test's own redis-server")
    return proc


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def worker_pids(url: str) -> set[int]:
    from rq import Worker

    try:
        return {w.pid for w in Worker.all(connection=redis.Redis.from_url(url))}
    except redis.RedisError:
        return set()


@pytest.mark.parametrize("command", ["rqworker", "agent_worker"])
def test_the_worker_loop_brings_a_worker_back(command, child_env, settings, runtime, tmp_path):
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    server = start_redis(port, tmp_path)
    log = open(tmp_path / "worker.log", "wb")
    loop = subprocess.Popen(
        ["bash", str(ROOT / "scripts" / "worker.sh"), command, "default"],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**child_env, "REDIS_URL": url, "PYTHON": sys.executable},
    )
    settings.REDIS_URL = url
    settings.RQ_QUEUES = {"default": {"URL": url}}

    def executes(prompt: str) -> None:
        run_id = runtime.enqueue({"prompt": prompt, "script": [{"content": "ok"}], "tools": []})
        try:
            wait_for(
                lambda: AgentRun.objects.get(pk=run_id).status == RunStatus.COMPLETED,
                timeout=120,
                what=f"the run {prompt!r} to complete",
            )
        except AssertionError:
            import django_rq

            queue = django_rq.get_queue("default")
            job = queue.fetch_job(f"nrllm-run-{run_id}-0")
            run_status = AgentRun.objects.get(pk=run_id).status
            state = f"queue length {len(queue)}, job {job and job.get_status()}, run {run_status}"
            tail = (tmp_path / "worker.log").read_text(errors="replace")[-3000:]
            raise AssertionError(f"{prompt!r} did not complete ({state}); worker log:\n{tail}") from None

    try:
        wait_for(lambda: worker_pids(url), timeout=60, what="the first worker")

        server.terminate()  # Redis goes away and comes back empty
        server.wait(10)
        server = start_redis(port, tmp_path)
        executes("after a Redis restart")

        def loops_worker() -> set[int]:  # the loop's worker process of that kind (not its backoff sleep)
            return {p for p in _children(loop.pid) if _cmdline(p).split(b"\0")[2:3] == [command.encode()]}

        [pid] = wait_for(loops_worker, timeout=120, what="the loop's worker")
        os.kill(pid, signal.SIGTERM)  # the worker process exits (warm shutdown: no job is in flight)
        try:
            wait_for(lambda: loops_worker() - {pid}, timeout=90, what="a new worker")
        except AssertionError:
            old = [(p, _cmdline(p)) for p in [pid, *_children(pid)] if Path(f"/proc/{p}").exists()]
            tail = (tmp_path / "worker.log").read_text(errors="replace")[-3000:]
            raise AssertionError(f"no new worker; still alive: {old}; worker log:\n{tail}") from None
        assert f"{command} exited with status" in (tmp_path / "worker.log").read_text(errors="replace")
        executes("after the worker exited")

        workers = _children(loop.pid)
        os.kill(loop.pid, signal.SIGTERM)  # ends the loop and, warmly, its worker
        assert loop.wait(30) == 0
        assert not any(Path(f"/proc/{p}").exists() for p in workers)
    finally:
        try:
            os.killpg(loop.pid, signal.SIGKILL)  # whatever is left of the group this test started
        except ProcessLookupError:
            pass
        loop.wait(10)
        server.terminate()
        server.wait(10)
        log.close()
