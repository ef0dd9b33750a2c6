"""Recover queued runs whose wake-up call is gone.

A queued run is only a row; a job (RQ) or a task of the in-process executor wakes a worker
for it. That job can vanish: Redis restarted without persistence, a queue emptied, a crash
between the commit and the enqueue, or a job failed because the database was unreachable at
its claim. The run would then wait forever. ``sweep_queued`` finds queued runs older than
``QUEUED_STALE_SECONDS`` that have no live job and dispatches them again.

Dispatching twice is safe: the job carries only the run id and the claim (``queued →
running``, one winner) decides, so a run whose job was merely slow executes once.

The sweep runs in ``manage.py agent_reap`` (schedule it: README, "Security"), at every RQ
worker's maintenance pass (``GracefulWorker``), and by itself every
``QUEUED_SWEEP_SECONDS`` in a process that uses the in-process executor (``make run``).
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, connections
from django.utils import timezone

from . import dispatch, executors, store
from .conf import app_settings
from .models import AgentRun, RunStatus

logger = logging.getLogger(__name__)


@dataclass
class SweepReport:
    """What one sweep found: runs dispatched again, and stale runs whose job is still there."""

    recovered: list[uuid.UUID] = field(default_factory=list)
    waiting: int = 0  # stale, but a job is queued, scheduled or executing for them
    error: str = ""  # the queue could not be asked; the rest waits for the next sweep
    dry_run: bool = False

    def summary(self) -> str:
        verb = "would recover" if self.dry_run else "recovered"
        text = f"queued runs: {len(self.recovered)} {verb} (no job), {self.waiting} still waiting for a worker"
        return f"{text}; stopped early: {self.error}" if self.error else text


def _stale_seconds() -> float:
    return app_settings.QUEUED_STALE_SECONDS


def stale_queued(*, older_than: float, limit: int, now: datetime | None = None) -> list[uuid.UUID]:
    """Ids of queued runs created more than ``older_than`` seconds ago, oldest first."""
    cutoff = (now or timezone.now()) - timedelta(seconds=older_than)
    return list(
        AgentRun.objects.filter(status=RunStatus.QUEUED, created_at__lte=cutoff)
        .order_by("created_at")
        .values_list("id", flat=True)[:limit]
    )


def sweep_queued(*, limit: int = 100, dry_run: bool = False, older_than: float | None = None) -> SweepReport:
    """Dispatch again every stale queued run (see the module docstring) that has no live job."""
    report = SweepReport(dry_run=dry_run)
    older_than = _stale_seconds() if older_than is None else older_than
    for run_id in stale_queued(older_than=older_than, limit=limit):
        try:
            if has_live_job(run_id, stale_after=older_than):
                report.waiting += 1
                continue
            if not dry_run:
                dispatch.dispatch(run_id)
        except Exception as exc:  # the queue is unreachable: leave the rest for the next sweep
            report.error = f"{type(exc).__name__}: {str(exc)[:200]}"
            logger.warning("queued sweep stopped: %s", report.error)
            break
        report.recovered.append(run_id)
    if report.recovered and not dry_run:
        logger.warning("queued sweep: dispatched %d stranded runs again", len(report.recovered))
    return report


def has_live_job(run_id: uuid.UUID, *, stale_after: float | None = None) -> bool:
    """Whether something will still wake the run: the chosen executor's job for the run's next
    segment (RQ: queued, scheduled and not long overdue, or executing on a live worker) or a
    task of this process's in-process executor (``executors.base.Executor.holds``)."""
    return executors.chosen().holds(
        str(run_id),
        job_id=dispatch.job_id(run_id, store.next_sequence(run_id)),
        stale_after=_stale_seconds() if stale_after is None else stale_after,
    )


# --- the in-process executor sweeps by itself ------------------------------------------------
_sweeper: threading.Thread | None = None
_sweeper_lock = threading.Lock()
_stop = threading.Event()


def start_local_sweeper(**_: Any) -> bool:
    """Start (once per process) a daemon thread that sweeps every ``QUEUED_SWEEP_SECONDS``.

    Only for the in-process executor (the chosen one when there is no ``REDIS_URL``): its tasks
    die with their process, so the next process must pick up what the last one left queued. ``0`` disables it. Connected
    to ``request_started`` (``make run``) and called when the executor starts. Returns whether
    a sweeper runs.
    """
    global _sweeper
    interval = app_settings.QUEUED_SWEEP_SECONDS
    if interval <= 0 or executors.chosen() is not executors.LOCAL:
        return False
    with _sweeper_lock:
        if _sweeper is None or not _sweeper.is_alive():
            _stop.clear()
            _sweeper = threading.Thread(
                target=_sweep_forever, args=(interval,), name="nrllm-queued-sweeper", daemon=True
            )
            _sweeper.start()
    return True


def stop_local_sweeper(timeout: float = 10.0) -> None:
    """Stop the sweeper thread (tests, shutdown)."""
    global _sweeper
    _stop.set()
    with _sweeper_lock:
        if _sweeper is not None:
            _sweeper.join(timeout)
            _sweeper = None


def _sweep_forever(interval: float) -> None:
    while not _stop.wait(interval):
        try:
            sweep_queued()
        except DatabaseError as exc:  # the database is away: try again next time
            logger.warning("queued sweep failed: %s", type(exc).__name__)
        except Exception:
            logger.exception("queued sweep failed")
        finally:
            connections.close_all()  # this thread's connections only
