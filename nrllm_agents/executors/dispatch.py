"""Hands queued run ids to the executor that ``NRLLM_AGENTS["EXECUTOR"]`` chooses (``executors``).

With the default ``"auto"``: RQ workers when ``REDIS_URL`` is set (production), else threads of
this process (the embedded development default). Either way the run ends in
``jobs.execute_run``, so the claim decides, wherever the run was queued.

Callers dispatch after the run's row is committed (``AgentRuntime.enqueue`` defers to
``transaction.on_commit``), so a job never arrives before the row it names.
"""

from __future__ import annotations

import uuid
from typing import Any

from .. import executors, store
from ..domain.errors import Kind, KindedError
from ..store.db import connection_lost, reconnecting


class EnqueueError(KindedError, RuntimeError):
    """The queue refused the job for good (a bad configuration, not an outage); the run was
    settled ``failed`` (``enqueue_failed``)."""

    kind = Kind.UNAVAILABLE

    def subject(self) -> dict[str, Any]:
        return {"run_id": str(self.run_id)}

    def detail(self) -> str:
        return "The queue did not accept the run; it was marked failed (enqueue_failed). Try again later."

    def sentence(self) -> str:
        return f"The queue refused the run: {self}"

    def __init__(self, run_id: uuid.UUID, cause: str) -> None:
        super().__init__(f"could not enqueue run {run_id}: {cause}")
        self.run_id = run_id
        self.cause = cause


def job_id(run_id: uuid.UUID | str, segment: int = 0) -> str:
    """The job id of one segment of a run.

    ``segment`` is the number of steps the run had recorded when it was dispatched: 0 for a
    new run, more for the resume after an approval. A repeated dispatch of the same segment
    names the same job; a resume gets a job of its own instead of overwriting the finished
    job (and its results) of the segment before it.
    """
    return f"nrllm-run-{run_id}-{segment}"


def uses_rq() -> bool:
    """True when queued runs go to RQ workers (the chosen executor is RQ)."""
    return executors.chosen() is executors.RQ


def dispatch(run_id: uuid.UUID, *, delay_seconds: float = 0, segment: int | None = None) -> str:
    """Send the run id to its executor and return the job id.

    ``delay_seconds`` (a retry's backoff) schedules the job instead: RQ workers must then
    run with ``--with-scheduler`` (one is enough). ``segment`` is the run's recorded step
    count when the caller knows it (0 for a new run); otherwise it is read. Raises whatever
    the queue raised: an outage (``is_outage``) leaves the run queued for the queued sweep;
    anything else (a bad configuration) makes the caller settle the run ``failed``.
    """
    if segment is None:  # a read: tried again on a fresh connection while the one it used dies
        segment = reconnecting(lambda: store.next_sequence(run_id))
    jid = job_id(run_id, segment)
    executors.chosen().submit(str(run_id), job_id=jid, delay_seconds=delay_seconds)
    return jid


def is_outage(exc: BaseException) -> bool:
    """Whether a dispatch failed because the queue or the database is away for now
    (``QueueUnavailable``, a refused or timed-out connection, a database connection that stayed
    lost), not because the queue refused the job: the run then stays ``queued`` and the queued
    sweep (``recovery.py``) dispatches it once both are back."""
    return isinstance(exc, (executors.QueueUnavailable, ConnectionError, TimeoutError)) or connection_lost(exc)
