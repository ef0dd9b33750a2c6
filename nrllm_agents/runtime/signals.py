"""Django signals a host can connect to, sent in the process that executed the run, after the
commit that made what they announce durable (so a receiver reads it back from the database).

- ``step_recorded(run_id, sequence, kind)``: a step of the run was recorded.
- ``run_settled(run_id, status, termination_reason, final_text)``: the run completed, failed or
  was cancelled (a cancel once the executing process stopped; a queued run cancelled before any
  process executed it sends nothing).

The sender is the ``AgentRun`` model (as ``post_save``'s is the model class). A receiver's
exception is logged, never raised into the run (``send_robust``). With no receiver connected they
cost one attribute read per step.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from django.db import transaction
from django.dispatch import Signal

from ..models import AgentRun

logger = logging.getLogger(__name__)

step_recorded = Signal()
run_settled = Signal()

SETTLED = frozenset({"completed", "failed", "cancelled"})


def _send(signal: Signal, **kwargs: Any) -> None:
    for _receiver, result in signal.send_robust(sender=AgentRun, **kwargs):
        if isinstance(result, Exception):
            logger.error(
                "a %s receiver failed: %r", "run_settled" if signal is run_settled else "step_recorded", result
            )


def announce_step(run_id: uuid.UUID, sequence: int, kind: str) -> None:
    """Send ``step_recorded`` once the step's commit is done (at once outside a transaction)."""
    if step_recorded.receivers:
        transaction.on_commit(lambda: _send(step_recorded, run_id=run_id, sequence=sequence, kind=kind))


def announce_end(run_id: uuid.UUID, outcome: str, status: str, termination_reason: str, final_text: str | None) -> None:
    """Send ``run_settled`` when a segment ended the run (``outcome`` completed, failed or cancelled)."""
    if outcome in SETTLED and run_settled.receivers:
        transaction.on_commit(
            lambda: _send(
                run_settled,
                run_id=run_id,
                status=status,
                termination_reason=termination_reason,
                final_text=final_text,
            )
        )
