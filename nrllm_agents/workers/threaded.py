"""An RQ worker that executes many runs at once, one thread per run, in one process.

``manage.py agent_worker [QUEUE...] --concurrency N`` takes jobs from the same django-rq queues as
any RQ worker and dequeues only while it has a free slot; each job runs ``jobs.execute_run`` on a
thread of its own with RQ's bookkeeping intact. What RQ's forking worker does by killing its work
horse this one does with the run row: the lease replaces per-job timeouts, a cancel replaces
stop-job commands, SIGTERM drains (the steps in flight run on to their boundary, within
``WORKER_DRAIN_SECONDS``, then every run goes back to the queue; a second one exits at once), and a
Redis outage is ridden out (``outages.py``).

How each of those works: docs/internals.md ("The threaded worker"); when to choose it:
docs/operations/workers.md.
"""

from __future__ import annotations

import gc
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any

import redis
from rq.exceptions import DequeueTimeout
from rq.executions import Execution
from rq.job import Job
from rq.queue import Queue
from rq.timeouts import BaseDeathPenalty
from rq.utils import now
from rq.worker import BaseWorker, WorkerStatus

from ..conf import app_settings, env
from ..executors.pool import SegmentExecutor
from ..executors.rq_queue import OUTAGES
from ..runtime.segment import drain, hand_back_all
from . import heap
from .maintenance import Maintainer, interval
from .outages import RidesOutOutages

DEFAULT_CONCURRENCY = 100
POLL_SECONDS = 1  # a blocking dequeue returns at least this often, so a shutdown is seen promptly
HEARTBEAT_EVERY = 5.0  # seconds between the worker's own heartbeats (RQ sends one per job otherwise)
# A thread woken by a cancel waits for the GIL at most about this long while others compute
# (Python's default is 5 ms); hundreds of mostly idle threads make the shorter wait cheap.
SWITCH_INTERVAL = env("NRLLM_WORKER_SWITCH_INTERVAL", float, 0.001)


class NoDeathPenalty(BaseDeathPenalty):
    """RQ's job timeout, not enforced: a thread cannot be killed. The run lease replaces it."""

    def setup_death_penalty(self) -> None:
        pass

    def cancel_death_penalty(self) -> None:
        pass


def drain_seconds() -> float:
    """How long a warm shutdown lets the steps in flight run on: ``WORKER_DRAIN_SECONDS``, at most
    ``LEASE_SECONDS`` (a step running longer than its lease has lost its run to the reaper)."""
    return max(0.0, min(float(app_settings.WORKER_DRAIN_SECONDS), float(app_settings.LEASE_SECONDS)))


def default_concurrency() -> int:
    """``NRLLM_WORKER_CONCURRENCY``, else ``DEFAULT_CONCURRENCY``."""
    return int(env("NRLLM_WORKER_CONCURRENCY", int, DEFAULT_CONCURRENCY))


class ThreadedWorker(RidesOutOutages, BaseWorker):
    """An RQ worker running up to ``concurrency`` jobs at once on threads (see the module)."""

    death_penalty_class = NoDeathPenalty

    def __init__(self, *args: Any, concurrency: int | None = None, **kwargs: Any) -> None:
        self._local = threading.local()  # before super().__init__, which sets ``execution``
        self._in_flight: dict[str, tuple[Job, Execution]] = {}
        self._in_flight_lock = threading.Lock()
        kwargs.setdefault("maintenance_interval", interval())
        super().__init__(*args, **kwargs)
        self.concurrency = concurrency or default_concurrency()
        self.executor = SegmentExecutor(self.concurrency, name="nrllm-agent-worker", daemon=True)
        self._handed_back = threading.Event()
        self._last_maintained = 0.0
        self._last_heartbeat = 0.0
        self.maintainer: Maintainer | None = None
        sys.setswitchinterval(SWITCH_INTERVAL)

    def bootstrap(self, *args: Any, **kwargs: Any) -> None:
        super().bootstrap(*args, **kwargs)
        frozen = heap.freeze()  # no full collection pauses the steps in flight (heap.py)
        self.log.info("Worker %s: %d objects frozen out of the garbage collector's reach", self.name, frozen)
        self.maintainer = Maintainer(self.name, interval(), self.log).start()

    # RQ keeps one "current execution" per worker; here each thread has its own.
    @property
    def execution(self) -> Execution | None:
        return getattr(self._local, "execution", None)

    @execution.setter
    def execution(self, value: Execution | None) -> None:
        self._local.execution = value

    # --- dequeue only while a slot is free ------------------------------------------------------
    def dequeue_job_and_maintain_ttl(
        self, timeout: int | None, max_idle_time: int | None = None
    ) -> tuple[Job, Queue] | None:
        """Wait for a free slot, then for a job; ``None`` once a stop was requested (or, in burst
        mode, when the queues are empty), which ends the work loop."""
        idle_since = time.monotonic()
        while not self._stop_requested:
            self._maintain()
            if not self.executor.wait_for_slot(POLL_SECONDS):
                idle_since = time.monotonic()
                continue
            state = WorkerStatus.BUSY if self.executor.in_flight else WorkerStatus.IDLE
            if state != self.get_state():  # RQ's own record of what it last told Redis
                self.set_state(state)
            if self.should_run_maintenance_tasks:
                self.run_maintenance_tasks()
            try:
                result = self.queue_class.dequeue_any(
                    self._ordered_queues,
                    None if timeout is None else POLL_SECONDS,
                    connection=self.connection,
                    job_class=self.job_class,
                    serializer=self.serializer,
                    death_penalty_class=self.death_penalty_class,
                )
            except DequeueTimeout:
                if (
                    max_idle_time is not None
                    and not self.executor.in_flight
                    and time.monotonic() - idle_since > max_idle_time
                ):
                    return None
                continue
            except OUTAGES as exc:  # wait for Redis (bounded pauses); the runs in flight go on meanwhile
                self.ride_out(exc, "dequeue")
                continue
            self._redis_back()
            if result is None:  # burst mode: the queues are empty
                return None
            job, queue = result
            if self._stop_requested:  # the stop came during the dequeue (often for the job it handed back)
                self._put_back(job, queue)
                return None
            self.reorder_queues(reference_queue=queue)
            job.redis_server_version = self.get_redis_server_version()  # type: ignore[no-untyped-call]  # rq leaves this method unannotated
            self.log.info(
                "Worker %s: %s: %s (%d in flight)", self.name, queue.name, job.id, self.executor.in_flight + 1
            )
            return result
        return None

    def execute_job(self, job: Job, queue: Queue) -> None:
        """Start the job on a thread and return at once; the work loop then waits for a slot."""
        self.executor.submit(self._perform, job, queue)

    def _put_back(self, job: Job, queue: Queue) -> None:
        """Return a dequeued job to the front of its queue, untouched, for another worker: a
        worker that is stopping claims nothing (it would only hand the run back again)."""
        try:
            with self.connection.pipeline() as pipeline:
                pipeline.lrem(queue.intermediate_queue_key, 1, job.id)
                pipeline.lpush(queue.key, job.id)
                pipeline.execute()
            self.log.info("Worker %s: stopping: job %s put back in %s", self.name, job.id, queue.name)
        except OUTAGES as exc:  # the job stays in RQ's intermediate list; the queued sweep recovers its run
            self._redis_away(exc, f"putting job {job.id} back")

    def _perform(self, job: Job, queue: Queue) -> None:
        self.execution = None
        if self._stop_requested:
            self._put_back(job, queue)
            return
        try:
            self.prepare_execution(job)
        except OUTAGES as exc:  # the job stays in RQ's intermediate list; the sweep recovers its run
            self._redis_away(exc, f"preparing job {job.id}")
            return
        assert self.execution is not None
        with self._in_flight_lock:
            self._in_flight[job.id] = (job, self.execution)
        try:
            self.perform_job(job, queue)
        except OUTAGES as exc:  # RQ's bookkeeping of the job failed; the run's row holds its outcome
            self._redis_away(exc, f"the bookkeeping of job {job.id}")
        finally:
            with self._in_flight_lock:
                self._in_flight.pop(job.id, None)
            self.execution = None

    # --- heartbeats of every job in flight --------------------------------------------------
    def _maintain(self, force: bool = False) -> None:
        """Every ``job_monitoring_interval``: extend the worker's, and every job's and execution's,
        heartbeat, as a forking worker does for its one work horse."""
        if not force and time.monotonic() - self._last_maintained < self.job_monitoring_interval:
            return
        self._last_maintained = time.monotonic()
        if heap.refreeze_if_grown():  # a run imported a provider's SDK: out of the collector's reach too
            self.log.info("Worker %s: %d objects frozen (new modules)", self.name, gc.get_freeze_count())
        with self._in_flight_lock:
            jobs = list(self._in_flight.values())
        try:
            with self.connection.pipeline() as pipeline:
                self.heartbeat(self.job_monitoring_interval + 60, pipeline=pipeline)
                for job, execution in jobs:
                    ttl = int(self.get_heartbeat_ttl(job))
                    execution.heartbeat(job.started_job_registry, ttl, pipeline=pipeline)
                    job.heartbeat(now(), ttl, pipeline=pipeline, xx=True)
                pipeline.execute()
        except redis.exceptions.RedisError as exc:
            self.log.warning("Worker %s: heartbeat failed (%s)", self.name, exc)

    def heartbeat(self, timeout: int | None = None, pipeline: Any = None) -> None:
        """The worker's own heartbeat, at most every ``HEARTBEAT_EVERY`` seconds (RQ's loop sends
        one per job: two round trips on the path of every dequeue)."""
        if pipeline is None and time.monotonic() - self._last_heartbeat < HEARTBEAT_EVERY:
            return
        self._last_heartbeat = time.monotonic()
        super().heartbeat(timeout, pipeline=pipeline)

    def get_heartbeat_ttl(self, job: Job) -> int:
        return int(self.job_monitoring_interval) + 60  # no job timeout is enforced (see NoDeathPenalty)

    # --- shutdown ---------------------------------------------------------------------------
    def request_stop(self, signum: int, frame: FrameType | None) -> None:
        """Warm shutdown: stop dequeuing, let the steps in flight reach their boundary (within
        ``drain_seconds()``), and hand every run back there; then cut short what is still in
        flight and hand it back too. A second signal exits at once (``request_force_stop``).

        Nothing here touches Redis or the database (a handler interrupts the main thread
        anywhere, possibly holding a connection pool's lock); a thread does the work.
        """
        self._shutdown_requested_date = now()
        signal.signal(signal.SIGINT, self.request_force_stop)
        signal.signal(signal.SIGTERM, self.request_force_stop)
        self._stop_requested = True
        drain()  # each run goes back at its next boundary: no step in flight is repeated
        threading.Thread(target=self._hand_back, name="nrllm-hand-back", daemon=True).start()

    def _hand_back(self) -> None:
        grace = drain_seconds()
        in_flight = self.executor.in_flight
        if in_flight and grace > 0:
            self.log.info(
                "Worker %s: warm shutdown: %d runs hand back at their next boundary (within %g s)",
                self.name,
                in_flight,
                grace,
            )
        drained = self.executor.wait_idle(grace)
        cut = 0 if drained else hand_back_all()  # the grace is over: cut short what still runs
        self._handed_back.set()
        self.log.info(
            "Worker %s: warm shutdown: handing %d runs back (%d steps cut short)",
            self.name,
            self.executor.in_flight,
            cut,
        )
        try:
            self.set_shutdown_requested_date()  # type: ignore[no-untyped-call]  # rq leaves this method unannotated
        except redis.exceptions.RedisError:
            pass

    def teardown(self) -> None:
        """Wait until every thread has returned (completed, or handed its run back), then leave."""
        if self.executor.in_flight:
            self.log.info("Worker %s: waiting for %d runs in flight", self.name, self.executor.in_flight)
        while not self.executor.wait_idle(POLL_SECONDS):
            self._maintain()
        if self.maintainer is not None:
            self.maintainer.stop()
        if self.scheduler:
            self.stop_scheduler()
        super().teardown()
