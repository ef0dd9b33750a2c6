"""One segment's draw on the shared budgets: reserve before each model call, settle after it,
and stop the calls in flight of the other runs when a budget runs out.

- Before a model call starts (``reserve``): its worst case (the prompt's estimated tokens plus
  the provider's ``max_tokens``, or ``BUDGET_MAX_TOKENS``, at the price in force) is reserved
  against every budget covering the run; a reservation that does not fit stops the run through
  the cancel path (``system``, ``budget_exhausted``) before the call starts.
- When the call ends (``charge``, at its step boundary, interrupted calls included): its actual
  cost replaces the reservation, in the fence that records the step (``store.record_step``):
  a segment that lost its run records nothing and charges nothing; its reservation is given
  back when it ends (``release``). A budget that this spend exhausted cancels every other run
  whose call in flight draws on it, by the same guarded cancel: its NOTIFY trips their tokens
  (``live.interrupts``), which abort the calls; each interrupted step is recorded with its
  partial spend.
- A run no budget covers costs one query per segment, and nothing per call.
- At admission (``first_call``): the worst case of the run's first call must fit its budgets.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from .. import store
from ..admission.budgets import words
from ..conf import app_settings
from ..domain import Price, Usage
from ..models import AgentRun, Budget, CancelSource, TerminationReason
from ..store import budgets
from ..store.budgets import Refusal
from . import trees
from .worst_case import worst_case

logger = logging.getLogger(__name__)


class Spend:
    """Per segment: the budgets covering the run (read on first use) and the call it holds."""

    def __init__(self, run_id: uuid.UUID, owner: str) -> None:
        self.run_id = run_id
        self.owner = owner
        self.price: Price | None = None
        self.max_tokens = 0
        self._ids: list[int] | None = None
        self._held = False

    def arm(self, provider: Any, price: Price | None) -> None:
        """The provider and price of this segment: what a call's worst case is made of."""
        self.price = price
        stated = getattr(provider, "max_tokens", None)
        self.max_tokens = stated if isinstance(stated, int) and stated > 0 else int(app_settings.BUDGET_MAX_TOKENS)

    @property
    def ids(self) -> list[int]:
        if self._ids is None:
            row = AgentRun.objects.filter(pk=self.run_id).values_list("owner_id", "agent_version_id").first()
            self._ids = budgets.covering(*row) if row is not None else []
        return self._ids

    def worst_case(self, messages: Sequence[Mapping[str, Any]]) -> tuple[Decimal, int]:
        """What the next call may cost at most: ``(cost, tokens)``."""
        return worst_case(messages, self.max_tokens, self.price)

    def reserve(self, messages: Sequence[Mapping[str, Any]]) -> Refusal | None:
        """Reserve the next call's worst case; the ``Refusal`` when a budget has no room for it."""
        if not self.ids:
            return None
        cost, tokens = self.worst_case(messages)
        refused = budgets.reserve(self.ids, run_id=self.run_id, owner=self.owner, cost=cost, tokens=tokens)
        self._held = refused is None
        return refused

    def charge(self, usage: Usage) -> budgets.Charge | None:
        """What the call that ended, spending ``usage``, charges with its step (``None``: no budget
        covers the run); the step's fence settles it (``store.record_step``)."""
        if not self.ids:
            return None
        return budgets.Charge(self.ids, usage.cost or Decimal(0), usage.total_tokens)

    def charged(self, charge: budgets.Charge) -> None:
        """The step's fence settled ``charge``: stop the others' calls in flight on a budget it exhausted."""
        self._held = False
        if charge.exhausted:
            stop_drawing(charge.exhausted, besides=self.run_id)

    def release(self) -> None:
        """The segment ends while it still holds a reservation (its call never ran, or its step
        was not recorded): give it back, charging nothing."""
        if self._held:
            self._held = False
            budgets.release(self.run_id, self.owner)


def stop(run_id: uuid.UUID, refusal: Refusal) -> store.Transition:
    """Cancel a run for a budget: the guarded cancel, by the system, ``budget_exhausted``."""
    return trees.cancel(  # and the runs below it (its sub-agents'), which inherit the cancel
        run_id,
        source=CancelSource.SYSTEM,
        reason=words(refusal),
        termination_reason=TerminationReason.BUDGET_EXHAUSTED,
        detail=refusal.detail(),
    ).transition


def stop_drawing(exhausted: Sequence[int], *, besides: uuid.UUID | None = None) -> list[uuid.UUID]:
    """Cancel every run (but ``besides``) whose call in flight draws on an ``exhausted`` budget;
    returns the runs this cancelled (a run cancelled already is not cancelled twice)."""
    runs = budgets.drawing_on(exhausted, besides=besides)
    if not runs:
        return []
    budget = Budget.objects.select_related("user", "group", "agent").get(pk=min(exhausted))
    refusal = Refusal(budgets.use(budget), "cost" if budget.max_cost is not None else "tokens")
    stopped = []
    for run_id in runs:
        if stop(run_id, refusal).applied:
            logger.info("run %s cancelled by the system: %s", run_id, words(refusal))
            stopped.append(run_id)
    return stopped
