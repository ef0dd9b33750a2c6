"""The RQ job: a wake-up call carrying nothing but a run id. The run row is the state."""

from __future__ import annotations

import logging

from django.db import InterfaceError, OperationalError, close_old_connections

logger = logging.getLogger(__name__)


def execute_run(run_id: str) -> str | None:
    """Claim and execute a queued run; returns its outcome, or ``None`` when the claim lost.

    A run cancelled before this job runs, or already claimed by another delivery of the
    same job (or another worker), loses the claim and nothing executes. Both RQ workers and
    the in-process executor call this, so both take the identical claim path.
    """
    from ..runtime.agent_runtime import AgentRuntime

    try:
        close_old_connections()  # a worker's connection may have gone stale between jobs
        result = AgentRuntime().run_queued(run_id)
        if result is None:
            logger.info("run %s: claim lost (cancelled, finished or claimed elsewhere); nothing to do", run_id)
            return None
        return result.outcome.value
    except (OperationalError, InterfaceError) as exc:
        # Raised to RQ, which retries the job later (executors.base.CLAIM_RETRY_DELAYS); the claim
        # decides whether a retry has anything left to do.
        logger.warning("run %s: database unreachable (%s); the job will be retried", run_id, type(exc).__name__)
        raise
    finally:
        close_old_connections()
