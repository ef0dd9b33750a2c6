"""Workers ride out a Redis outage instead of exiting.

RQ's work loop retries only its blocking dequeue; any other call that meets Redis away (heartbeat,
state, registry maintenance, the horse monitor) ends the process, and a run in flight loses its
worker. Both workers (``worker.GracefulWorker``, ``threaded.ThreadedWorker``) mix this class in:
calls that only report are skipped while Redis is away, calls the loop needs wait for Redis with
the bounded pauses of ``RetryPolicy.reconnect()`` (a shutdown still ends the wait), the worker
registers itself again once Redis is back, and the re-forked RQ scheduler can never hold the
worker's shutdown. Runs live in the database and go on; a job lost with Redis is recovered by the
queued sweep.

Each case in full: docs/internals.md ("Riding out a Redis outage").
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from rq import worker_registration
from rq.utils import now

from ..executors.rq_queue import OUTAGES
from ..store.retries import RetryPolicy

T = TypeVar("T")

SCHEDULER_STOP_SECONDS = 5.0
"""How long a stopping worker waits for its scheduler process after SIGTERM before SIGKILL. The
scheduler holds no run (scheduled jobs live in Redis, its locks expire), so killing it loses
nothing; RQ's own ``stop_scheduler`` waits without a bound."""

if TYPE_CHECKING:
    from rq.worker import BaseWorker as _Base

    from .maintenance import Maintainer
else:
    _Base = object


class RidesOutOutages(_Base):
    """Mixin for an ``rq.worker.BaseWorker`` subclass (see the module docstring)."""

    _outage_since: float | None = None
    maintainer: Maintainer | None = None  # the worker's own maintenance thread, once started

    # --- the bookkeeping nobody waits for: skipped while Redis is away ----------------------
    def heartbeat(self, timeout: int | None = None, pipeline: Any = None) -> None:
        if pipeline is not None:  # only queued on a pipeline: no I/O here
            super().heartbeat(timeout, pipeline=pipeline)
            return
        self._skipped_while_away(lambda: super(RidesOutOutages, self).heartbeat(timeout), "heartbeat")

    def set_state(self, state: str, pipeline: Any = None) -> None:
        if pipeline is not None:
            super().set_state(state, pipeline=pipeline)
            return
        self._state = state  # known here even while Redis cannot be told
        self._skipped_while_away(lambda: super(RidesOutOutages, self).set_state(state), "state")

    def set_current_job_working_time(self, current_job_working_time: float, pipeline: Any = None) -> None:
        if pipeline is not None:
            super().set_current_job_working_time(current_job_working_time, pipeline=pipeline)
            return
        self.current_job_working_time = current_job_working_time
        self._skipped_while_away(
            lambda: super(RidesOutOutages, self).set_current_job_working_time(current_job_working_time), "working time"
        )

    def maintain_heartbeats(self, job: Any) -> None:
        self._skipped_while_away(lambda: super(RidesOutOutages, self).maintain_heartbeats(job), "job heartbeat")

    def run_maintenance_tasks(self) -> None:
        """RQ's registry maintenance; during an outage it waits for the next interval. It may
        fork the scheduler again (after an outage killed it): never half-way through a pass of
        the maintenance thread, whose locks the child would inherit held."""
        guard = self.maintainer.fork_guard if self.maintainer is not None else contextlib.nullcontext()
        try:
            with guard:
                super().run_maintenance_tasks()  # type: ignore[no-untyped-call]
        except OUTAGES as exc:
            self.last_cleaned_at = now()  # type: ignore[assignment]
            self._redis_away(exc, "registry maintenance")

    def stop_scheduler(self) -> None:
        """RQ's, bounded: SIGTERM to the scheduler process, then SIGKILL after
        ``SCHEDULER_STOP_SECONDS`` if it has not exited."""
        process = self.scheduler._process if self.scheduler is not None else None
        if process is None or not process.pid:
            return
        with contextlib.suppress(OSError):
            os.kill(process.pid, signal.SIGTERM)
        process.join(SCHEDULER_STOP_SECONDS)
        if process.is_alive():
            self.log.warning(
                "Worker %s: its scheduler (pid %s) did not stop within %g s; killed",
                self.name,
                process.pid,
                SCHEDULER_STOP_SECONDS,
            )
            process.kill()
            process.join(SCHEDULER_STOP_SECONDS)

    def unsubscribe(self) -> None:
        """RQ's, with a bounded wait for its pubsub thread.

        RQ runs that thread with ``sleep_time=60``, and since redis-py 8.2 ``stop()`` joins it
        without a timeout: once unsubscribed, the thread sleeps out its 60 s in ``get_message``,
        and every warm shutdown took a minute. The thread is a daemon: it dies with the process.
        """
        thread, pubsub = self.pubsub_thread, self.pubsub
        if not thread or pubsub is None:
            return
        self.log.info("Worker %s: unsubscribing from channel %s", self.name, self.pubsub_channel_name)
        pubsub.unsubscribe()
        try:
            thread.stop(timeout=1)  # redis-py >= 8.2
        except TypeError:
            thread.stop()  # older redis-py: only clears its flag
        thread.join(timeout=1)
        pubsub.close()

    def teardown(self) -> None:
        try:
            super().teardown()  # type: ignore[no-untyped-call]
        except OUTAGES as exc:  # leaving anyway: Redis forgets the worker when its key expires
            self._redis_away(exc, "registering its death")

    # --- what the loop needs: wait until Redis is back ------------------------------------
    def _set_ip_address(self, connection: Any) -> None:  # RQ's first call to Redis, in __init__
        self.until_redis(lambda: super(RidesOutOutages, self)._set_ip_address(connection), "start")

    def bootstrap(self, *args: Any, **kwargs: Any) -> None:
        self.until_redis(lambda: super(RidesOutOutages, self).bootstrap(*args, **kwargs), "start")

    def check_for_suspension(self, burst: bool) -> None:
        self.until_redis(lambda: super(RidesOutOutages, self).check_for_suspension(burst), "suspension check")

    def dequeue_job_and_maintain_ttl(self, timeout: int | None, max_idle_time: int | None = None) -> Any:
        return self.until_redis(
            lambda: super(RidesOutOutages, self).dequeue_job_and_maintain_ttl(timeout, max_idle_time), "dequeue"
        )

    def until_redis(self, call: Callable[[], T], what: str) -> T | None:
        """``call()``, tried again while Redis is away (``ride_out``); ``None`` when a shutdown
        was requested meanwhile."""
        while True:
            try:
                result = call()
            except OUTAGES as exc:
                self.ride_out(exc, what)
                if self._stop_requested:
                    return None
                continue
            self._redis_back()
            return result

    def ride_out(self, exc: BaseException, what: str) -> None:
        """Redis failed ``what``: wait, with the bounded pauses of ``RetryPolicy.reconnect()``,
        until it answers again (then register this worker again), or a shutdown is requested."""
        self._redis_away(exc, what)
        policy = RetryPolicy.reconnect()
        attempt = 0
        while not self._stop_requested:
            time.sleep(policy.delay(attempt))
            attempt += 1
            try:
                self.connection.ping()
            except OUTAGES:
                continue
            self._redis_back()
            if self._outage_since is None:
                return

    def _skipped_while_away(self, call: Callable[[], None], what: str) -> None:
        try:
            call()
        except OUTAGES as exc:
            self._redis_away(exc, what)
        else:
            self._redis_back()

    def _redis_away(self, exc: BaseException, what: str) -> None:
        if self._outage_since is None:
            self._outage_since = time.monotonic()
            self.log.warning(
                "Worker %s: Redis unreachable (%s during %s); riding it out, runs in flight go on",
                self.name,
                type(exc).__name__,
                what,
            )

    def _redis_back(self) -> None:
        """After an outage: register this worker again (its hash and its place in the workers'
        sets, which a restarted Redis has forgotten), then say how long Redis was away."""
        if self._outage_since is None:
            return
        try:
            if self.birth_date is not None:  # born: a worker that is still starting registers itself
                self._register_again()
        except OUTAGES:
            return  # still away: the next call tries again
        away = time.monotonic() - self._outage_since
        self._outage_since = None
        self.log.warning("Worker %s: Redis is back after %.1f s", self.name, away)

    def _register_again(self) -> None:
        """This worker's hash and its place in the workers' sets, written again (idempotent)."""
        with self.connection.pipeline() as pipeline:
            pipeline.hset(self.key, mapping=self.serialize())
            pipeline.hdel(self.key, "death")
            worker_registration.register(self, pipeline)
            pipeline.expire(self.key, self.worker_ttl + 60)
            pipeline.execute()
