"""Admission under the shared budgets: a run that cannot start under one is refused.

A run is admitted when every budget covering it has room for the worst case of its first model
call (its prompt's estimate and its provider's ``max_tokens``, at the price in force: a
remainder smaller than that is nothing left) and for one more run; the run is counted
(``runs``) in the same all-or-nothing statement (``store.budgets.reserve``), which reserves
nothing for the call. The refusal names the budget, what is left and when it resets; every
surface says it: REST 429, the playground's message, the CLI (exit 2).
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

from ..conf import app_settings
from ..domain.errors import Kind, KindedError
from ..models import BudgetWindow
from ..store import budgets
from ..store.budgets import Refusal

__all__ = ["BudgetRefused", "admit", "admit_id", "words"]


def words(refusal: Refusal) -> str:
    """The sentence every surface shows for a budget that refused a run or stopped one."""
    u = refusal.use
    budget = u.budget
    span = "in total" if budget.window == BudgetWindow.TOTAL else f"per {budget.window}"
    ceiling = {
        "cost": (
            budget.max_cost,
            f"{_amount(refusal.left)} {app_settings.CURRENCY} left of {_amount(budget.max_cost)}",
        ),
        "tokens": (budget.max_tokens, f"{refusal.left} tokens left of {budget.max_tokens}"),
        "runs": (budget.max_runs, f"{refusal.left} runs left of {budget.max_runs}"),
    }[refusal.ceiling][1]
    resets = f"; it resets at {u.resets_at.isoformat()}" if u.resets_at is not None else "; it does not reset"
    return f"budget of {budget.subject} {span} is exhausted: {ceiling}{resets}"


def _amount(value: Any) -> str:
    text = f"{value:f}" if value is not None else "0"
    return text.rstrip("0").rstrip(".") if "." in text else text


class BudgetRefused(KindedError):
    """A budget covering the run has nothing left for it."""

    kind = Kind.TOO_MANY

    def __init__(self, refusal: Refusal) -> None:
        self.refusal = refusal
        super().__init__(words(refusal))

    def subject(self) -> dict[str, Any]:
        return {"budget": self.refusal.detail()}


def admit(
    owner: Any,
    agent_version_id: int | None = None,
    worst_case: Callable[[], tuple[Decimal, int]] | None = None,
) -> None:
    """Count one run of ``owner`` against every budget covering it, or raise ``BudgetRefused``
    (nothing counted then). ``worst_case``: what the run's first call may cost at most,
    ``(cost, tokens)``, which every budget must have left; asked only when a budget covers the
    run. No budget: one indexed query, nothing written."""
    admit_id(getattr(owner, "pk", None), agent_version_id, worst_case)


def admit_id(
    owner_id: Any,
    agent_version_id: int | None = None,
    worst_case: Callable[[], tuple[Decimal, int]] | None = None,
) -> None:
    """``admit`` for the owner of id ``owner_id`` (``None``: a run of no owner)."""
    ids = budgets.covering(owner_id, agent_version_id)
    if not ids:
        return
    cost, tokens = worst_case() if worst_case is not None else (Decimal(0), 0)
    refusal = budgets.reserve(ids, runs=1, fit_cost=cost, fit_tokens=tokens)
    if refusal is not None:
        raise BudgetRefused(refusal)
