"""Waits for tests and benchmarks: until the in-process executor is idle, the cancel listener
is connected, or the embedded maintenance thread has stopped. The product never waits on these."""

from __future__ import annotations

import time

from nrllm_agents import executors
from nrllm_agents.live.listener import listener
from nrllm_agents.workers import maintenance


def wait_local_idle(timeout: float = 30.0) -> bool:
    """Wait until the in-process executor has nothing queued or running; False if it is still
    busy after ``timeout`` seconds."""
    return executors.LOCAL.wait_idle(timeout)


def wait_listening(timeout: float = 5.0) -> bool:
    """Block until the PostgreSQL cancel listener is connected; False after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if listener.listening.wait(0.05):
            return True
        listener.ensure_running()
    return False


def stop_local_maintenance(timeout: float = 10.0) -> None:
    """Stop the maintenance thread of a process on the in-process executor (``start_local``)."""
    with maintenance._local_lock:
        if maintenance._local is not None:
            maintenance._local.stop(timeout)
            maintenance._local = None
