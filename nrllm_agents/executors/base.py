"""The one interface of the executors: what ``dispatch`` hands a queued run to.

An executor only wakes a run up: it calls ``jobs.execute_run(run_id)`` somewhere, some time,
and the claim in the store (``queued → running``, one winner) decides whether anything
executes. So an executor may deliver a run twice or late, never lose one silently: a job that
cannot reach the database is retried after ``CLAIM_RETRY_DELAYS``, and the queued sweep
(``recovery.py``) dispatches again a run whose job is gone.
"""

from __future__ import annotations

from typing import Protocol

# A job that cannot reach the database (before its claim, or anywhere) fails and is retried
# after these delays (seconds) instead of being dropped; the claim makes a retry harmless.
# Beyond them, the queued sweep recovers the run.
CLAIM_RETRY_DELAYS = (1, 2, 5, 10, 30, 60)


class QueueUnavailable(ConnectionError):
    """The queue cannot be reached right now (Redis down, restarting, a network cut): a
    transient outage. A run whose job it refused stays ``queued``; the queued sweep dispatches
    it once the queue is back."""


class Executor(Protocol):
    """Executes queued runs by their id; ``name`` is its value of ``NRLLM_AGENTS["EXECUTOR"]``."""

    name: str

    def submit(self, run_id: str, *, job_id: str, delay_seconds: float = 0) -> None:
        """Have ``jobs.execute_run(run_id)`` called, after ``delay_seconds`` (a retry's backoff).

        ``job_id`` names the job (``dispatch.job_id``): a repeated submit of the same segment
        names the same job. Raises ``QueueUnavailable`` while the queue cannot be reached (the
        run stays queued for the sweep), else whatever the queue raised (a bad configuration:
        the caller then settles the run ``failed``).
        """
        ...

    def holds(self, run_id: str, *, job_id: str, stale_after: float) -> bool:
        """Whether something will still wake the run: job ``job_id`` (or a task for the run) is
        waiting, scheduled (and not more than ``stale_after`` seconds overdue) or executing."""
        ...

    def wait_idle(self, timeout: float) -> bool:
        """Block until this process executes nothing for this executor; False after ``timeout``."""
        ...
