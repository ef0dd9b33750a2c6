"""The RQ job: a wake-up call carrying nothing but a run id. The run row is the state."""

from __future__ import annotations

from django.db import close_old_connections


def execute_run(run_id: str) -> str | None:
    """Claim and execute a queued run; returns its outcome, or ``None`` when the claim lost.

    A run cancelled before this job runs, or already claimed by another delivery of the
    same job, loses the claim and nothing executes.
    """
    from .runtime import AgentRuntime

    close_old_connections()
    try:
        result = AgentRuntime().run_queued(run_id)
        return None if result is None else result.outcome.value
    finally:
        close_old_connections()
