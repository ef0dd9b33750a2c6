"""The processes that execute queued runs: the job an executor calls (``jobs``), the forking RQ
worker (``rq_worker``), the threaded worker (``threaded``), and what every worker does on the
side (``maintenance``, ``outages``, ``warm``).

Public: the two worker classes a host names in settings or on the command line,
``nrllm_agents.workers.GracefulWorker`` (``RQ["WORKER_CLASS"]``) and
``nrllm_agents.workers.ThreadedWorker`` (``rqworker --worker-class``), re-exported from their
private modules (whose paths keep working). They are imported on first use, so importing one
of this package's modules does not load RQ's worker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..domain.exports import on_first_use

__all__ = ["GracefulWorker", "ThreadedWorker"]

_PUBLIC = {"GracefulWorker": ".rq_worker", "ThreadedWorker": ".threaded"}

if TYPE_CHECKING:
    from .rq_worker import GracefulWorker
    from .threaded import ThreadedWorker


__getattr__ = on_first_use(globals(), _PUBLIC)
