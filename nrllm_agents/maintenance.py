"""What every worker does on its own between jobs: recover the runs that nobody else will.

- the reaper (``AgentRuntime.reap``): overdue runs nothing executes are cancelled
  (``deadline_exceeded``), runs whose segment died (a worker killed, out of memory) are
  requeued or dead-lettered once their lease lapsed, and cancels that a dead segment never
  acknowledged are acknowledged;
- the queued sweep (``recovery.sweep_queued``): queued runs whose job is gone are dispatched
  again.

So a fleet of workers needs no scheduled ``agent_reap``. Every write of both is a guarded
statement, so any number of workers may run them at the same moment and each run is recovered
exactly once. Run every ``MAINTENANCE_SECONDS`` by ``worker.GracefulWorker`` (``rqworker``) and
``threaded.ThreadedWorker`` (``agent_worker``), with RQ's own maintenance; and, on the embedded
default, every ``QUEUED_SWEEP_SECONDS`` by a thread of the web process (``start_local``).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.db import connections

from . import executors
from .conf import app_settings
from .recovery import sweep_queued
from .runtime import AgentRuntime

logger = logging.getLogger(__name__)


def interval() -> int:
    """Seconds between two passes (RQ's ``maintenance_interval``)."""
    return max(1, round(app_settings.MAINTENANCE_SECONDS))


def maintain(worker_name: str, log: Any = logger) -> None:
    """One pass; a failure (the database or Redis away) is logged and the next pass tries again."""
    try:
        report = AgentRuntime().reap()
        if report.requeued or report.dead_lettered or report.acknowledged or report.deadline_cancelled:
            log.warning("Worker %s: reaper: %s", worker_name, report.summary())
    except Exception as exc:
        log.warning("Worker %s: reaper failed (%s)", worker_name, type(exc).__name__)
    try:
        swept = sweep_queued()
        if swept.recovered:
            log.warning("Worker %s: %s", worker_name, swept.summary())
    except Exception as exc:
        log.warning("Worker %s: queued sweep failed (%s)", worker_name, type(exc).__name__)
    finally:
        connections.close_all()  # never hand an open connection to a forked work horse


# --- a process on the in-process executor maintains by itself -------------------------------------
_sweeper: threading.Thread | None = None
_sweeper_lock = threading.Lock()
_stop = threading.Event()


def start_local(**_: Any) -> bool:
    """Start (once per process) a daemon thread that runs ``maintain`` every ``QUEUED_SWEEP_SECONDS``.

    Only for the in-process executor (the chosen one when there is no ``REDIS_URL``, ``make
    run``): its tasks die with their process, so the next process must pick up what the last
    one left queued or running. ``0`` disables it. Connected to ``request_started``, so
    management commands start no thread. Returns whether it runs.
    """
    global _sweeper
    every = app_settings.QUEUED_SWEEP_SECONDS
    if every <= 0 or executors.chosen() is not executors.LOCAL:
        return False
    with _sweeper_lock:
        if _sweeper is None or not _sweeper.is_alive():
            _stop.clear()
            _sweeper = threading.Thread(target=_forever, args=(every,), name="nrllm-maintenance", daemon=True)
            _sweeper.start()
    return True


def stop_local(timeout: float = 10.0) -> None:
    """Stop that thread (tests, shutdown)."""
    global _sweeper
    _stop.set()
    with _sweeper_lock:
        if _sweeper is not None:
            _sweeper.join(timeout)
            _sweeper = None


def _forever(every: float) -> None:
    while not _stop.wait(every):
        maintain("local")  # closes this thread's connections after each pass
