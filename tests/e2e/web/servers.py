"""Real HTTP servers as child processes on the test database, for tests that need one.

Shared by ``tests/integration/api/test_stream.py`` (uvicorn, gunicorn) and the browser tests
(runserver). Each server logs to a file; a server that does not come up fails the test with
its log.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _command(kind: str, port: int, workers: int = 1, threads: int = 8, app: str = "config.wsgi") -> list[str]:
    if kind == "runserver":
        return [sys.executable, str(ROOT / "manage.py"), "runserver", "--noreload", f"127.0.0.1:{port}"]
    if kind == "uvicorn":
        return [
            sys.executable,
            "-m",
            "uvicorn",
            "config.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--lifespan",
            "off",
            "--no-access-log",
            "--log-level",
            "warning",
            "--timeout-graceful-shutdown",
            "2",
        ]
    if kind == "gunicorn":
        return [
            sys.executable,
            "-m",
            "gunicorn",
            "-k",
            "gthread",
            "--workers",
            str(workers),
            "--threads",
            str(threads),
            "--bind",
            f"127.0.0.1:{port}",
            "--graceful-timeout",
            "2",
            "--log-level",
            "warning",
            app,
        ]
    raise ValueError(kind)


def stop(proc: subprocess.Popen, timeout: float = 15) -> None:
    """Terminate a child we started, and reap it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@contextlib.contextmanager
def serve(
    kind: str,
    env: dict[str, str],
    log_dir: Path,
    timeout: float = 60,
    *,
    workers: int = 1,
    threads: int = 8,
    app: str = "config.wsgi",
) -> Iterator[str]:
    """Run the app under ``kind`` (runserver, uvicorn, gunicorn; ``workers`` × ``threads`` and
    the WSGI module ``app`` for gunicorn); yield its base URL."""
    port = free_port()
    log_path = log_dir / f"{kind}-{port}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            _command(kind, port, workers, threads, app), cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                pytest.fail(f"{kind} exited with {proc.returncode}:\n{log_path.read_text(errors='replace')}")
            try:
                with urllib.request.urlopen(f"{base}/accounts/login/", timeout=5) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"{kind} did not answer within {timeout} s:\n{log_path.read_text(errors='replace')}")
            time.sleep(0.2)
        yield base
    finally:
        stop(proc)


def start_worker(env: dict[str, str], log_dir: Path) -> subprocess.Popen:
    """A real ``manage.py rqworker`` on the ``default`` queue (``env`` carries REDIS_URL)."""
    log = open(log_dir / "rqworker.log", "wb")
    try:
        return subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "rqworker", "default"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    finally:
        log.close()
