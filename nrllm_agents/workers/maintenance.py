"""What every worker does on its own schedule: recover the runs that nobody else will.

- the reaper (``AgentRuntime.reap``): overdue runs nothing executes are cancelled
  (``deadline_exceeded``), runs whose segment died are requeued or dead-lettered once their lease
  lapsed, and cancels that a dead segment never acknowledged are acknowledged;
- the queued sweep (``recovery.sweep_queued``): queued runs whose job is gone are dispatched again;
- retention (``AgentRuntime.retain``), when ``RETENTION`` sets a policy: stopped runs past it are
  purged or deleted, ``RETENTION_BATCH`` runs per short transaction, ``PASS_BATCHES``
  batches of each per pass at most, so a pass never holds a lock a running run waits on for long.

So a fleet of workers needs no scheduled ``agent_reap``. Every write of both is a guarded
statement, so any number of workers may run them at once and each run is recovered exactly once.
A ``Maintainer`` thread runs them at start and then every ``MAINTENANCE_SECONDS`` in every worker
process, busy or not; on the embedded default a thread of the web process does the same every
``QUEUED_SWEEP_SECONDS`` (``start_local``).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.db import connections

from .. import executors
from ..conf import app_settings
from ..executors.recovery import sweep_queued
from ..runtime.agent_runtime import AgentRuntime
from ..store import retention

logger = logging.getLogger(__name__)


PASS_BATCHES = 50  # retention batches of each kind one pass takes at most; the next pass goes on


def interval() -> int:
    """Seconds between two passes (RQ's ``maintenance_interval``)."""
    return max(1, round(float(app_settings.MAINTENANCE_SECONDS)))


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
    try:
        if retention.policy().active:
            kept = AgentRuntime().retain(max_batches=PASS_BATCHES)
            if kept.purged_runs or kept.deleted_runs:
                log.info("Worker %s: %s", worker_name, kept.summary())
    except Exception as exc:
        log.warning("Worker %s: retention failed (%s)", worker_name, type(exc).__name__)
    finally:
        connections.close_all()  # never hand an open connection to a forked work horse


class Maintainer:
    """A daemon thread that runs ``maintain`` after ``first_after`` seconds, then every ``every``
    seconds, until stopped.

    ``fork_guard`` is held during each pass: a forking worker takes it around ``fork()`` so that
    no work horse is born while this thread holds a database connection or a lock half-way.
    """

    def __init__(self, name: str, every: float, log: Any = logger, *, first_after: float = 0.0) -> None:
        self.name, self.every, self.log, self.first_after = name, every, log, first_after
        self.fork_guard = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Maintainer:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._forever, name="nrllm-maintenance", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _forever(self) -> None:
        if self._stop.wait(self.first_after):
            return
        while not self._stop.is_set():
            with self.fork_guard:
                maintain(self.name, self.log)  # closes this thread's connections after each pass
            self._stop.wait(self.every)


# --- a process on the in-process executor maintains by itself -------------------------------------
_local: Maintainer | None = None
_local_lock = threading.Lock()


def start_local(**_: Any) -> bool:
    """Start (once per process) a ``Maintainer`` that runs every ``QUEUED_SWEEP_SECONDS``.

    Only for the in-process executor (the chosen one when there is no ``REDIS_URL``, ``make
    run``): its tasks die with their process, so the next process must pick up what the last
    one left queued or running. ``0`` disables it. Connected to ``request_started``, so
    management commands start no thread. Returns whether it runs.
    """
    global _local
    every = app_settings.QUEUED_SWEEP_SECONDS
    if every <= 0 or executors.chosen() is not executors.LOCAL:
        return False
    with _local_lock:
        if _local is None or not _local.alive:
            _local = Maintainer("local", every, first_after=every).start()
    return True
