"""Hands queued run ids to whatever executes them: RQ workers, or an in-process executor.

With ``REDIS_URL`` set, a job carrying the run id goes to the django-rq queue and
``manage.py rqworker`` processes execute it (production). Without it, a small background
thread pool in this process executes it through the identical claim path (the embedded
development default; runs do not survive the process).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.db import connections

from .conf import app_settings

logger = logging.getLogger(__name__)

_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()
_in_flight = 0  # runs handed to the in-process executor and not yet finished
_idle = threading.Condition()


class EnqueueError(RuntimeError):
    """The queue did not accept the job; the run was settled ``failed`` (``enqueue_failed``)."""

    def __init__(self, run_id: uuid.UUID, cause: str) -> None:
        super().__init__(f"could not enqueue run {run_id}: {cause}")
        self.run_id = run_id


def job_id(run_id: uuid.UUID | str) -> str:
    """One job id per run, so a repeated dispatch names the same job."""
    return f"nrllm-run-{run_id}"


def uses_redis() -> bool:
    return bool(getattr(settings, "REDIS_URL", None))


def dispatch(run_id: uuid.UUID, *, delay_seconds: float = 0) -> None:
    """Send the run id to the executor. Raises on failure (the caller settles the run)."""
    if uses_redis():
        import django_rq

        # Our caller already waits for the commit; 'auto' enqueues right now.
        queue = django_rq.get_queue(app_settings.QUEUE_NAME, commit_mode="auto")
        kwargs = {"job_id": job_id(run_id), "job_timeout": app_settings.JOB_TIMEOUT,
                  "result_ttl": 3600, "failure_ttl": 7 * 24 * 3600, "description": f"agent run {run_id}"}
        if delay_seconds > 0:
            queue.enqueue_in(dt.timedelta(seconds=delay_seconds), "nrllm_agents.jobs.execute_run",
                             str(run_id), **kwargs)
        else:
            queue.enqueue("nrllm_agents.jobs.execute_run", str(run_id), **kwargs)
        return
    global _in_flight
    with _idle:
        _in_flight += 1  # counted before submit, so wait_local_idle never sees a gap
    _local_executor().submit(_run_locally, str(run_id), delay_seconds)


def _local_executor() -> ThreadPoolExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=int(app_settings.LOCAL_WORKERS),
                                           thread_name_prefix="nrllm-local-worker")
        return _executor


def _run_locally(run_id: str, delay_seconds: float) -> None:
    global _in_flight
    from .jobs import execute_run

    try:
        if delay_seconds > 0:
            time.sleep(delay_seconds)
        execute_run(run_id)
    except Exception:
        logger.exception("in-process execution of run %s failed", run_id)
    finally:
        connections.close_all()
        with _idle:
            _in_flight -= 1
            _idle.notify_all()


def wait_local_idle(timeout: float = 30.0) -> bool:
    """Wait until the in-process executor has nothing queued or running (tests, shutdown)."""
    deadline = time.monotonic() + timeout
    with _idle:
        while True:
            if _in_flight == 0:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            _idle.wait(min(remaining, 0.05))
