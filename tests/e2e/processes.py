"""Real ``manage.py rqworker`` processes for end-to-end tests (and the latency benchmark).

Each worker runs in its own process group (so its work horses go with it), on the database
and Redis named by the environment it is given, logs to a file, and is registered in Redis
under a name of ours, which is how readiness is detected. ``stop()`` always ends every
process it started: SIGTERM (RQ's warm shutdown), then SIGKILL for whatever is left.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from tests.waits import wait_for as wait_for  # the shared wait, for the tests and benches that import it from here

ROOT = Path(__file__).resolve().parent.parent.parent


class WorkerStartError(RuntimeError):
    """A worker process exited or did not register in Redis in time."""


# what a worker logs once it froze its startup heap (nrllm_agents/workers/heap.py)
FROZEN = re.compile(r"Worker \S+: [1-9][0-9]{3,} objects frozen out of the garbage collector's reach")


class Workers:
    """``count`` rqworker processes on ``queue``; a context manager that always stops them.

    ``env`` must carry ``DATABASE_URL`` and ``REDIS_URL`` (the Redis the test enqueues to).
    """

    def __init__(
        self,
        env: dict[str, str],
        *,
        count: int = 2,
        queue: str = "default",
        log_dir: Path | str,
        extra_args: tuple[str, ...] = (),
        command: str = "rqworker",
    ) -> None:
        if not env.get("REDIS_URL"):
            raise ValueError("workers need REDIS_URL in their environment")
        self.env = dict(env)
        self.count = count
        self.queue = queue
        self.log_dir = Path(log_dir)
        self.extra_args = extra_args
        self.command = command  # rqworker (a process per run) or agent_worker (many runs per process)
        self.prefix = f"nrllm-test-{uuid.uuid4().hex[:8]}"
        self.processes: list[subprocess.Popen[bytes]] = []
        self._logs: list[Any] = []

    @property
    def names(self) -> list[str]:
        return [f"{self.prefix}-{i}" for i in range(self.count)]

    def start(self, timeout: float = 60.0) -> Workers:
        """Start the processes and wait until each has registered with Redis."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            for name in self.names:
                log = open(self.log_dir / f"{name}.log", "wb")
                self._logs.append(log)
                self.processes.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            str(ROOT / "manage.py"),
                            self.command,
                            self.queue,
                            "--name",
                            name,
                            *self.extra_args,
                        ],
                        env=self.env,
                        cwd=ROOT,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
            self._wait_registered(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_registered(self, timeout: float) -> None:
        import redis
        from rq import Worker

        connection = redis.Redis.from_url(self.env["REDIS_URL"])
        deadline = time.monotonic() + timeout
        wanted = set(self.names)
        while True:
            for proc, name in zip(self.processes, self.names):
                if proc.poll() is not None:
                    raise WorkerStartError(f"worker {name} exited with {proc.returncode}:\n{self.log(name)}")
            try:
                registered = {w.name for w in Worker.all(connection=connection)}
            except redis.RedisError:  # a test that starts workers while its own Redis is down
                registered = set()
            if wanted <= registered:
                return
            if time.monotonic() > deadline:
                raise WorkerStartError(f"workers not registered after {timeout:g}s: {sorted(wanted - registered)}")
            time.sleep(0.1)

    def log(self, name: str) -> str:
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def logs(self) -> str:
        return "\n".join(f"--- {name}\n{self.log(name)}" for name in self.names)

    def log_text(self, name: str) -> str:
        """The whole log of one worker (``log`` keeps only its tail)."""
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def index_of_horse(self, pid: int) -> int:
        """Which of these workers forked the work horse ``pid``."""
        for index, proc in enumerate(self.processes):
            if pid in _children(proc.pid):
                return index
        raise LookupError(f"no worker of {self.prefix} has a child {pid}")

    def kill(self, index: int) -> None:
        """SIGKILL one worker as if its machine vanished: its process group, and its work horse,
        which RQ puts in a process group of its own (and whatever that horse started)."""
        proc = self.processes[index]
        horses = _children(proc.pid)
        _signal_group(proc, signal.SIGKILL)
        for pid in horses:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                _signal_pid(pid, signal.SIGKILL)
        proc.wait(10)

    def terminate(self, index: int) -> None:
        """SIGTERM to one worker process alone: RQ's warm shutdown (what a deploy sends)."""
        _signal_pid(self.processes[index].pid, signal.SIGTERM)

    def wait_exit(self, index: int, timeout: float = 60.0) -> int:
        """Wait for one worker process to exit; returns its exit code."""
        return self.processes[index].wait(timeout)

    def stop(self, grace: float = 10.0) -> None:
        """End every process this object started, and their work horses."""
        for proc in self.processes:
            if proc.poll() is None:
                _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in self.processes:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            # RQ puts each work horse in a process group of its own: end them by pid too.
            for pid in _children(proc.pid):
                _signal_pid(pid, signal.SIGKILL)
            _signal_group(proc, signal.SIGKILL)
            if proc.poll() is None:
                proc.wait(5)
        self.processes.clear()
        for log in self._logs:
            log.close()
        self._logs.clear()

    def __enter__(self) -> Workers:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _children(pid: int) -> list[int]:
    """The live child processes of ``pid`` (Linux ``/proc``), e.g. a worker's work horse."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            pass
    return found


def _signal_pid(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)  # the group this test started (start_new_session=True)
    except (ProcessLookupError, PermissionError):
        pass


# A process that has already paid Django's start-up and runs the ``agent_cancel`` command
# (the very same code as ``manage.py agent_cancel --json``) for each line of run ids it
# reads, so a test can cancel at a chosen moment instead of seconds after deciding to.
_CANCELLER = r"""
import io, json, sys, time
import django
django.setup()
from django.core.management import call_command
from django.core.management.base import CommandError
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    ids = line.split()
    if not ids:
        break
    out = io.StringIO()
    try:
        call_command("agent_cancel", *ids, "--json", stdout=out)
        code = 0
    except CommandError as exc:
        code = exc.returncode
    lines = [json.loads(x) for x in out.getvalue().splitlines() if x.strip()]
    print(json.dumps({"t": time.time(), "code": code, "results": lines}), flush=True)
"""


class Canceller:
    """A child process that runs ``agent_cancel`` on demand (see ``_CANCELLER``)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = {**env, "DJANGO_SETTINGS_MODULE": "config.settings"}
        self.proc: subprocess.Popen[str] | None = None

    def start(self, timeout: float = 60.0) -> Canceller:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _CANCELLER],
            env=self.env,
            cwd=ROOT,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        line = self._read(timeout)
        if not line.get("ready"):
            raise WorkerStartError(f"canceller did not start: {line}")
        return self

    def cancel(self, *run_ids: str, timeout: float = 60.0) -> dict[str, Any]:
        """Cancel now; returns ``{"t": when it returned, "code": exit code, "results": [json lines]}``."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(" ".join(map(str, run_ids)) + "\n")
        self.proc.stdin.flush()
        return self._read(timeout)

    def _read(self, timeout: float) -> dict[str, Any]:
        import json
        import selectors

        assert self.proc is not None and self.proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                raise TimeoutError("canceller did not answer")
        line = self.proc.stdout.readline()
        if not line:
            raise WorkerStartError(f"canceller exited with {self.proc.wait(5)}")
        return json.loads(line)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()  # type: ignore[union-attr]
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None
