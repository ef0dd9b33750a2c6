"""The in-process executor: threads of this process execute queued runs (no RQ, ``make run``).

One thread per run in flight, up to ``LOCAL_WORKERS`` at once, more wait (``SegmentExecutor``,
as in ``agent_worker``). Runs do not survive the process: the queued sweep of the next process
(``maintenance.start_local``) dispatches again what this one left queued.

What a thread calls for a run id is handed over by the app's ``ready()`` (``use_job``):
``jobs.execute_run`` sits above the runtime, which dispatches, so importing it here would be a
cycle.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import InterfaceError, OperationalError, connections

from ..conf import app_settings
from .base import CLAIM_RETRY_DELAYS
from .inflight import InFlight
from .pool import SegmentExecutor

logger = logging.getLogger(__name__)


class LocalExecutor:
    """Runs ``job(run_id)`` on threads of this process; a database outage is retried like RQ does."""

    name = "local"

    def __init__(self) -> None:
        self.job: Callable[[str], Any] | None = None
        self._threads: SegmentExecutor | None = None  # built on first use, LOCAL_WORKERS wide
        self._threads_lock = threading.Lock()
        self._in_flight = InFlight()  # tasks submitted and not yet finished
        self._runs: Counter[str] = Counter()  # the same, by run id
        self._runs_lock = threading.Lock()

    def use_job(self, job: Callable[[str], Any]) -> None:
        """Name the function each task calls with its run id (``jobs.execute_run``)."""
        self.job = job

    def submit(self, run_id: str, *, job_id: str, delay_seconds: float = 0) -> None:
        """Start a task for the run (a task needs no ``job_id``: the run id names it)."""
        self._submit(run_id, delay_seconds, attempt=0)

    def holds(self, run_id: str, *, job_id: str, stale_after: float) -> bool:
        """Whether a task of this process is waiting for, or executing, the run (a task is never
        overdue: it sleeps its own delay)."""
        with self._runs_lock:
            return self._runs[run_id] > 0

    def wait_idle(self, timeout: float = 30.0) -> bool:
        return self._in_flight.wait_idle(timeout)

    def _submit(self, run_id: str, delay_seconds: float, attempt: int) -> None:
        self._in_flight.started()  # counted before submit, so wait_idle never sees a gap
        with self._runs_lock:
            self._runs[run_id] += 1
        try:
            self._pool().submit(self._run, run_id, delay_seconds, attempt)
        except BaseException:
            self._finished(run_id)
            raise

    def _finished(self, run_id: str) -> None:
        with self._runs_lock:
            self._runs[run_id] -= 1
            if self._runs[run_id] <= 0:
                del self._runs[run_id]
        self._in_flight.finished()

    def _pool(self) -> SegmentExecutor:
        with self._threads_lock:
            if self._threads is None:
                # Not daemon threads: stopping the development server lets the runs in flight finish.
                self._threads = SegmentExecutor(app_settings.LOCAL_WORKERS, name="nrllm-local-worker", daemon=False)
            return self._threads

    def _run(self, run_id: str, delay_seconds: float, attempt: int) -> None:
        job = self.job
        try:
            if job is None:
                raise ImproperlyConfigured("the in-process executor has no job: the nrllm_agents app is not ready")
            if delay_seconds > 0:
                time.sleep(delay_seconds)  # a retry's backoff; the thread is the scheduler here
            job(run_id)
        except (OperationalError, InterfaceError) as exc:
            if attempt < len(CLAIM_RETRY_DELAYS):  # the database is away: try again later, as RQ would
                logger.warning("run %s: database unreachable (%s); retrying", run_id, type(exc).__name__)
                self._submit(run_id, CLAIM_RETRY_DELAYS[attempt], attempt + 1)
            else:
                logger.exception("in-process execution of run %s failed", run_id)
        except Exception:
            logger.exception("in-process execution of run %s failed", run_id)
        finally:
            connections.close_all()  # this thread's connections only
            self._finished(run_id)


LOCAL = LocalExecutor()
