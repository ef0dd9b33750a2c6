"""The RQ executor: a job carrying nothing but the run id goes to the django-rq queue, and
``manage.py agent_worker`` (or ``rqworker``) processes execute it, on any number of machines.

Named ``rq_queue`` so as not to shadow the ``rq`` library.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import redis
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from ..conf import app_settings
from .base import CLAIM_RETRY_DELAYS, QueueUnavailable

# The job's name on the queue. It is the old path of ``workers.jobs.execute_run`` and stays so:
# jobs already queued name it, and during a rolling deploy workers of the previous release run
# the jobs this one enqueues (``nrllm_agents/jobs.py`` re-exports the job from its new module).
JOB_FUNCTION = "nrllm_agents.jobs.execute_run"

# What Redis raises while it is away (down, restarting, loading its data, a failover in
# progress): transient, unlike a refused command or a bad configuration.
OUTAGES: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.ReadOnlyError,
)


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


@dataclass(frozen=True)
class JobState:
    """Where one job is, read at one instant (``job_state``)."""

    status: str | None  # the job hash's status; None when there is no such job
    worker_name: str
    in_queue: bool  # waiting in the queue's list
    dequeuing: bool  # popped by a worker into RQ's intermediate list, not yet marked started
    scheduled_at: float | None  # its score in the scheduled registry (a Unix time)


def job_state(queue: Any, job_id: str) -> JobState:
    """Read a job's status and its place in the queue, the intermediate list and the scheduled
    registry in one ``MULTI``/``EXEC``: an atomic snapshot, so a job moving between them (a
    worker's ``BLMOVE``, its start) is never missed in between."""
    from rq.job import Job
    from rq.registry import ScheduledJobRegistry

    with queue.connection.pipeline(transaction=True) as pipeline:
        pipeline.hmget(Job.key_for(job_id), "status", "worker_name")
        pipeline.lpos(queue.key, job_id)
        pipeline.lpos(queue.intermediate_queue_key, job_id)
        pipeline.zscore(ScheduledJobRegistry(queue=queue).key, job_id)  # type: ignore[no-untyped-call]  # rq: untyped __init__
        (status, worker), in_queue, dequeuing, when = pipeline.execute()
    return JobState(_text(status) or None, _text(worker), in_queue is not None, dequeuing is not None, when)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value or "")


def clear_job(queue: Any, job_id: str) -> None:
    """Delete a job that will never run, whole, even when RQ cannot.

    For a while after a worker dies mid-dequeue, RQ 2.x keeps the job's entry in its executions
    registry but no longer the execution's own hash, and ``Job.delete`` raises ``ValueError``
    (``Execution … not found in Redis``); and a job whose hash went meanwhile (a dead worker's
    job cleaned from its registries) makes it raise ``InvalidJobOperation`` (``Failed to
    retrieve status``). The keys are then removed by name: the job from its queue and
    registries, its executions' entries and hashes, and the job's own keys.
    """
    from rq.exceptions import InvalidJobOperation
    from rq.job import Job
    from rq.registry import (
        DeferredJobRegistry,
        FailedJobRegistry,
        FinishedJobRegistry,
        ScheduledJobRegistry,
        StartedJobRegistry,
    )

    job = Job(job_id, connection=queue.connection)
    try:
        job.delete()
        return
    except (ValueError, InvalidJobOperation):
        pass
    connection = queue.connection
    executions = job.execution_registry
    execution_ids = [_text(value) for value in connection.zrange(executions.key, 0, -1)]
    with connection.pipeline(transaction=True) as pipeline:
        pipeline.lrem(queue.key, 0, job_id)
        pipeline.lrem(queue.intermediate_queue_key, 0, job_id)
        for registry in (StartedJobRegistry, FinishedJobRegistry, FailedJobRegistry, DeferredJobRegistry):
            key = registry(queue=queue).key
            pipeline.zrem(key, job_id, *(f"{job_id}:{execution}" for execution in execution_ids))
        pipeline.zrem(ScheduledJobRegistry(queue=queue).key, job_id)  # type: ignore[no-untyped-call]
        for execution in execution_ids:
            pipeline.delete(f"rq:execution:{job_id}:{execution}")
        pipeline.delete(executions.key, job.key, job.dependents_key, job.dependencies_key)
        pipeline.execute()


class RqExecutor:
    """Enqueues one RQ job per segment of a run; RQ retries a job whose database was away.

    Retries and delayed jobs are scheduled: run at least one worker ``--with-scheduler``.
    """

    name = "rq"

    def __init__(self) -> None:
        self._queues: dict[tuple[str, str], Any] = {}

    def queue(self) -> Any:
        """This process's queue ``QUEUE_NAME``, built once per configuration and reused with its
        Redis connection pool (building one per dispatch opened a new Redis connection every
        time). redis-py's pool notices a fork and reconnects in the child."""
        import django_rq

        name = app_settings.QUEUE_NAME
        key = (name, repr(getattr(settings, "RQ_QUEUES", {}).get(name)))
        queue = self._queues.get(key)
        if queue is None:
            # Our caller already waited for the commit: enqueue now, not at some later commit.
            queue = self._queues[key] = django_rq.get_queue(name, commit_mode="auto")
        return queue

    def submit(self, run_id: str, *, job_id: str, delay_seconds: float = 0) -> None:
        from rq import Retry

        queue = self.queue()
        options = {
            "job_id": job_id,
            "job_timeout": job_timeout(),
            "result_ttl": 3600,
            "failure_ttl": 7 * 24 * 3600,
            "description": f"agent run {run_id}",
            "retry": Retry(max=len(CLAIM_RETRY_DELAYS), interval=list(CLAIM_RETRY_DELAYS)),
        }
        try:
            if delay_seconds > 0:
                queue.enqueue_in(dt.timedelta(seconds=delay_seconds), JOB_FUNCTION, run_id, **options)
            else:
                queue.enqueue(JOB_FUNCTION, run_id, **options)
        except OUTAGES as exc:
            raise QueueUnavailable(f"the queue is unreachable ({type(exc).__name__})") from exc

    def holds(self, run_id: str, *, job_id: str, stale_after: float) -> bool:
        """Whether job ``job_id`` is queued, being dequeued, scheduled (and not more than
        ``stale_after`` seconds overdue, i.e. a scheduler runs) or executing on a live worker.

        Everything that decides is read in one ``MULTI``/``EXEC`` (``job_state``), so a job a
        worker is dequeuing at that moment is seen where it is: still in the queue, in RQ's
        intermediate list (popped, not yet marked started) or started; never nowhere. A job that
        finished, failed or was stopped while the run is still queued is deleted here, so that
        dispatching again starts from a clean job of the same id.
        """
        from rq.job import JobStatus
        from rq.worker import Worker

        queue = self.queue()
        state = job_state(queue, job_id)
        if state.status is None:  # no such job
            return False
        if state.in_queue or state.dequeuing or state.status == JobStatus.DEFERRED:
            live = True
        elif state.status == JobStatus.SCHEDULED:
            overdue = (timezone.now().timestamp() - state.scheduled_at) if state.scheduled_at is not None else None
            live = overdue is not None and overdue <= stale_after
        elif state.status == JobStatus.STARTED:
            live = bool(state.worker_name) and bool(
                queue.connection.exists(Worker.redis_worker_namespace_prefix + state.worker_name)
            )
        else:
            live = False
        if not live:
            clear_job(queue, job_id)
        return live

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """True at once: workers, not this process, execute the jobs."""
        return True


RQ = RqExecutor()
