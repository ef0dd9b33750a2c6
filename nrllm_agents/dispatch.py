"""Hands queued run ids to whatever executes them: RQ workers, or an in-process executor.

With ``REDIS_URL`` set (production), a job carrying nothing but the run id goes to the
django-rq queue and ``manage.py agent_worker`` (or ``rqworker``) processes execute it. Without
it (the embedded development default), threads of this process execute it, one per run in
flight, up to ``LOCAL_WORKERS`` at once (``executor.SegmentExecutor``, as in ``agent_worker``). Both
end in ``jobs.execute_run``, i.e. ``AgentRuntime.run_queued``: the identical claim path,
so a run cancelled before its executor gets to it never executes, wherever it was queued.

Callers dispatch after the run's row is committed (``AgentRuntime.enqueue`` defers to
``transaction.on_commit``), so a job never arrives before the row it names.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import InterfaceError, OperationalError, connections

from .conf import app_settings
from .executor import SegmentExecutor
from .inflight import InFlight

logger = logging.getLogger(__name__)

JOB_FUNCTION = "nrllm_agents.jobs.execute_run"

_executor: SegmentExecutor | None = None
# What the in-process executor runs for a run id: ``jobs.execute_run``, handed over by the app's
# ready() (the job sits above the runtime, which dispatches: importing it here would be a cycle).
_local_job: Callable[[str], Any] | None = None


def use_local_job(job: Callable[[str], Any]) -> None:
    """Name the function the in-process executor runs for each run id (``jobs.execute_run``)."""
    global _local_job
    _local_job = job


_executor_lock = threading.Lock()
_in_flight = InFlight()  # runs handed to the in-process executor and not yet finished
_local_runs: Counter[str] = Counter()  # the same, by run id (recovery.py asks)
_local_runs_lock = threading.Lock()

# A job that cannot reach the database (before its claim, or anywhere) fails and is retried
# after these delays (seconds) instead of being dropped; the claim makes a retry harmless.
# RQ schedules them: run a worker --with-scheduler. Beyond them, the queued sweep recovers the run.
CLAIM_RETRY_DELAYS = (1, 2, 5, 10, 30, 60)


class EnqueueError(RuntimeError):
    """The queue did not accept the job; the run was settled ``failed`` (``enqueue_failed``)."""

    def __init__(self, run_id: uuid.UUID, cause: str) -> None:
        super().__init__(f"could not enqueue run {run_id}: {cause}")
        self.run_id = run_id
        self.cause = cause


def job_id(run_id: uuid.UUID | str, segment: int = 0) -> str:
    """The RQ job id of one segment of a run.

    ``segment`` is the number of steps the run had recorded when it was dispatched: 0 for a
    new run, more for the resume after an approval. A repeated dispatch of the same segment
    names the same job; a resume gets a job of its own instead of overwriting the finished
    job (and its results) of the segment before it.
    """
    return f"nrllm-run-{run_id}-{segment}"


def job_timeout() -> int:
    """Seconds RQ lets one job run, ``-1`` for no limit.

    From ``NRLLM_AGENTS["JOB_TIMEOUT"]`` (default: env ``NRLLM_JOB_TIMEOUT``, else 3600).
    Always passed explicitly: RQ's own default (180 s, or the queue's ``DEFAULT_TIMEOUT``)
    would kill a long run in the middle of a step. When the limit does strike, RQ raises
    in the job and the run settles ``failed`` (never left ``running``). Raises
    ``ImproperlyConfigured`` for anything but a positive integer or -1.
    """
    value = app_settings.JOB_TIMEOUT
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not (value == -1 or value > 0):
        raise ImproperlyConfigured(
            f"NRLLM_AGENTS['JOB_TIMEOUT'] must be a positive number of seconds "
            f"or -1 (no limit), not {str(value)[:40]!r}"
        )
    return value


def uses_redis() -> bool:
    """True when queued runs go to RQ workers (``REDIS_URL`` is set)."""
    return bool(getattr(settings, "REDIS_URL", None))


_queues: dict[tuple[str, str], Any] = {}


def _queue(name: str) -> Any:
    """This process's queue ``name``, built once per configuration and reused with its Redis
    connection pool (building one per dispatch opened a new Redis connection every time).
    redis-py's pool notices a fork and reconnects in the child."""
    import django_rq

    key = (name, repr(getattr(settings, "RQ_QUEUES", {}).get(name)))
    queue = _queues.get(key)
    if queue is None:
        # Our caller already waited for the commit: enqueue now, not at some later commit.
        queue = _queues[key] = django_rq.get_queue(name, commit_mode="auto")
    return queue


def dispatch(run_id: uuid.UUID, *, delay_seconds: float = 0, segment: int | None = None) -> str:
    """Send the run id to its executor and return the job id.

    ``delay_seconds`` (a retry's backoff) schedules the job instead: RQ workers must then
    run with ``--with-scheduler`` (one is enough). ``segment`` is the run's recorded step
    count when the caller knows it (0 for a new run); otherwise it is read. Raises whatever
    the queue raised (Redis unreachable, bad configuration): the caller settles the run
    ``failed`` so that no queued row waits for a job that does not exist.
    """
    from . import store

    jid = job_id(run_id, store.next_sequence(run_id) if segment is None else segment)
    if uses_redis():
        queue = _queue(app_settings.QUEUE_NAME)
        from rq import Retry

        options = {
            "job_id": jid,
            "job_timeout": job_timeout(),
            "result_ttl": 3600,
            "failure_ttl": 7 * 24 * 3600,
            "description": f"agent run {run_id}",
            "retry": Retry(max=len(CLAIM_RETRY_DELAYS), interval=list(CLAIM_RETRY_DELAYS)),
        }
        if delay_seconds > 0:
            queue.enqueue_in(dt.timedelta(seconds=delay_seconds), JOB_FUNCTION, str(run_id), **options)
        else:
            queue.enqueue(JOB_FUNCTION, str(run_id), **options)
        return jid
    _submit_locally(str(run_id), delay_seconds)
    return jid


# --- the in-process executor (no REDIS_URL) -------------------------------------------------
def _submit_locally(run_id: str, delay_seconds: float = 0, attempt: int = 0) -> None:
    _in_flight.started()  # counted before submit, so wait_local_idle never sees a gap
    with _local_runs_lock:
        _local_runs[run_id] += 1
    try:
        _local_executor().submit(_run_locally, run_id, delay_seconds, attempt)
    except BaseException:
        _local_finished(run_id)
        raise


def _local_finished(run_id: str) -> None:
    with _local_runs_lock:
        _local_runs[run_id] -= 1
        if _local_runs[run_id] <= 0:
            del _local_runs[run_id]
    _in_flight.finished()


def in_flight_locally(run_id: uuid.UUID | str) -> bool:
    """Whether this process's in-process executor holds a task for the run."""
    with _local_runs_lock:
        return _local_runs[str(run_id)] > 0


def _local_executor() -> SegmentExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            # Not daemon threads: stopping the development server lets the runs in flight finish.
            _executor = SegmentExecutor(int(app_settings.LOCAL_WORKERS), name="nrllm-local-worker", daemon=False)
        return _executor


def _run_locally(run_id: str, delay_seconds: float = 0, attempt: int = 0) -> None:
    execute_run = _local_job
    if execute_run is None:
        raise ImproperlyConfigured("the in-process executor has no job: the nrllm_agents app is not ready")
    try:
        if delay_seconds > 0:
            time.sleep(delay_seconds)  # a retry's backoff; the thread is the scheduler here
        execute_run(run_id)
    except (OperationalError, InterfaceError) as exc:
        if attempt < len(CLAIM_RETRY_DELAYS):  # the database is away: try again later, as RQ would
            logger.warning("run %s: database unreachable (%s); retrying", run_id, type(exc).__name__)
            _submit_locally(run_id, CLAIM_RETRY_DELAYS[attempt], attempt + 1)
        else:
            logger.exception("in-process execution of run %s failed", run_id)
    except Exception:
        logger.exception("in-process execution of run %s failed", run_id)
    finally:
        connections.close_all()  # this thread's connections only
        _local_finished(run_id)


def wait_local_idle(timeout: float = 30.0) -> bool:
    """Wait until the in-process executor has nothing queued or running (tests, shutdown).

    Returns False if it is still busy after ``timeout`` seconds.
    """
    return _in_flight.wait_idle(timeout)
