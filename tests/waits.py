"""Waits for tests and benchmarks: until a condition holds (``wait_for``), the in-process executor
is idle, the cancel listener is connected, or the embedded maintenance thread has stopped. The
product never waits on these. Importable before Django is set up (the e2e helpers and ``bench/``
import it in the parent process): the app's modules are imported where used."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


def wait_for(
    predicate: Any,
    *,
    timeout: float = 60.0,
    interval: float = 0.05,
    what: str = "condition",
    explain: Callable[[], str] | None = None,
) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail with ``what`` after ``timeout``
    (and what ``explain`` says of the state then: a worker's log, the runs' statuses)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            said = f"\n{explain()}" if explain else ""
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}{said}")
        time.sleep(interval)


def wait_local_idle(timeout: float = 30.0) -> bool:
    """Wait until the in-process executor has nothing queued or running; False if it is still
    busy after ``timeout`` seconds."""
    from nrllm_agents import executors

    return executors.LOCAL.wait_idle(timeout)


def wait_listening(timeout: float = 5.0) -> bool:
    """Block until the PostgreSQL cancel listener is connected; False after ``timeout``."""
    from nrllm_agents.live.listener import listener

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if listener.listening.wait(0.05):
            return True
        listener.ensure_running()
    return False


def stop_local_maintenance(timeout: float = 10.0) -> None:
    """Stop the maintenance thread of a process on the in-process executor (``start_local``)."""
    from nrllm_agents.workers import maintenance

    with maintenance._local_lock:
        if maintenance._local is not None:
            maintenance._local.stop(timeout)
            maintenance._local = None


def models_called(journal: str | Path, run_ids: Iterable[Any]) -> int:
    """How many of ``run_ids`` have started a model call, by the call journal at ``journal``
    (``NRLLM_CALL_JOURNAL``). A recorded ``request`` step is not yet a call in flight: the run
    still passes its gate, where a cancel committed first stops it with no call to interrupt."""
    path = Path(journal)
    wanted = {str(r) for r in run_ids}
    if not path.exists():
        return 0
    lines = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return len({line["run_id"] for line in lines if line.get("what") == "model" and line.get("run_id") in wanted})
