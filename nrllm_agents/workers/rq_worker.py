"""An RQ worker that hands its run back to the queue on SIGTERM instead of killing or waiting on it.

The default ``manage.py rqworker`` class (``RQ["WORKER_CLASS"]`` in settings). On a warm
shutdown (SIGTERM or Ctrl-C to the worker) it signals its work horse; the run in flight stops
at its next step boundary and is requeued — not failed, not cancelled — so another worker
continues it from its stream. Deploys neither kill runs nor wait for them to finish.

On PostgreSQL each horse also inherits a warm database connection opened by the worker while
it was idle (``nrllm_agents.workers.warm``), so a job claims its run without connecting first.

It rides out a Redis outage (``outages.RidesOutOutages``): the horse in flight is watched to
its end, and the worker waits for Redis instead of exiting. Its maintenance (the reaper and the
queued sweep) runs on a thread of its own (``maintenance.Maintainer``), also while a horse runs.
"""

from __future__ import annotations

import os
import signal
from types import FrameType
from typing import Any

from django.db import connections
from rq.worker import Worker

from ..executors.rq_queue import OUTAGES
from ..observability import tracing
from ..runtime.segment import shutdown_requested
from . import heap, warm
from .maintenance import Maintainer, interval
from .outages import RidesOutOutages

HANDOFF_SIGNAL = signal.SIGRTMIN


def _hand_off(signum: int, frame: FrameType | None) -> None:
    shutdown_requested.set()  # checked at the next step boundary; nothing else happens in a handler


class GracefulWorker(RidesOutOutages, Worker):
    """``rq.Worker`` whose work horse requeues its run at the next boundary on shutdown.

    Its horses use no connection pool: each runs one job on one connection, which a pool
    would not share with anyone, and behind a pool a database outage is met only after the
    pool's timeout instead of at once (the job's claim then retries later, as it should).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        for conn in connections.all(initialized_only=False):
            conn.settings_dict.get("OPTIONS", {}).pop("pool", None)
        kwargs.setdefault("maintenance_interval", interval())
        super().__init__(*args, **kwargs)
        self.maintainer: Maintainer | None = None

    def bootstrap(self, *args: Any, **kwargs: Any) -> None:
        super().bootstrap(*args, **kwargs)
        if not self._is_horse:
            frozen = heap.freeze()  # each horse inherits it: no full collection pauses its step in flight (heap.py)
            self.log.info("Worker %s: %d objects frozen out of the garbage collector's reach", self.name, frozen)
            self.maintainer = Maintainer(self.name, interval(), self.log).start()

    def teardown(self) -> None:
        if self.maintainer is not None and not self._is_horse:
            self.maintainer.stop()
        super().teardown()

    def setup_work_horse_signals(self) -> None:
        super().setup_work_horse_signals()  # type: ignore[no-untyped-call]  # rq leaves this method unannotated
        # A SIGTERM sent to the whole process group must not kill a step in flight; the
        # worker forwards the shutdown as HANDOFF_SIGNAL, and a cold shutdown still SIGKILLs.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(HANDOFF_SIGNAL, _hand_off)

    @property
    def dequeue_timeout(self) -> int:
        """An idle worker waits for a job at most one maintenance interval: RQ runs its own registry
        maintenance only between two waits, which otherwise last ``worker_ttl - 15`` s."""
        return min(super().dequeue_timeout, getattr(self, "maintenance_interval", interval()))

    def fork_work_horse(self, job: Any, queue: Any) -> None:
        # The horse inherits a warm database connection (see nrllm_agents.workers.warm), and is never
        # forked half-way through a maintenance pass of the worker's other thread.
        warm.before_fork()
        if self.maintainer is None:
            super().fork_work_horse(job, queue)
        else:
            with self.maintainer.fork_guard:
                super().fork_work_horse(job, queue)
        warm.after_fork_in_worker()  # only the worker gets here: the horse exits in the call

    def execute_job(self, job: Any, queue: Any) -> None:
        """Fork and watch the horse; Redis away before the fork or after the horse's end costs
        only RQ's bookkeeping of the job (the run's row is the truth: the sweep and the reaper
        recover it), never the worker."""
        try:
            super().execute_job(job, queue)
        except OUTAGES as exc:
            self.log.warning("Worker %s: job %s: Redis away around its execution", self.name, job.id)
            self.ride_out(exc, "a job's bookkeeping")

    def monitor_work_horse(self, job: Any, queue: Any) -> None:
        super().monitor_work_horse(job, queue)
        warm.prepare()  # for the next job, while idle

    def perform_job(self, job: Any, queue: Any) -> bool:
        try:
            return super().perform_job(job, queue)
        finally:
            if self._is_horse:
                connections.close_all()  # say goodbye to the server before os._exit()
                tracing.flush()  # and export the run's spans: os._exit() skips the provider's own shutdown

    def handle_warm_shutdown_request(self) -> None:
        if self.horse_pid:
            self.log.info("Worker %s: handing the run in flight back to the queue", self.name)
            try:
                os.kill(self.horse_pid, HANDOFF_SIGNAL)
            except ProcessLookupError:
                pass
