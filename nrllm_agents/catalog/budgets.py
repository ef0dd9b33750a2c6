"""Budgets as records: set, list and delete them by their subject and window (the admin, the
API and ``agent_budgets`` all come here). Their counters are ``store.budgets``' alone."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db.models import Q, QuerySet

from ..access import policy
from ..conf import app_settings
from ..domain.errors import Kind, KindedError
from ..models import Agent, Budget, BudgetScope, BudgetWindow
from ..money import parsing
from ..store.budgets import use

__all__ = [
    "BudgetProblem",
    "as_dict",
    "covering_user",
    "delete",
    "existing",
    "parse_ceiling",
    "set_budget",
    "subject_of",
    "visible_to",
]


class BudgetProblem(KindedError):
    """The budget cannot be set as asked."""

    kind = Kind.INVALID


def subject_of(scope: str, name: str | None) -> dict[str, Any]:
    """The fields naming a budget's subject: ``{"user": <User>}``, ``{"group": …}``, ``{"agent": …}``
    or ``{}`` (everyone). Raises ``BudgetProblem`` for an unknown scope or name."""
    if scope == BudgetScope.EVERYONE:
        if name:
            raise BudgetProblem("everyone's budget names no subject")
        return {}
    if scope not in BudgetScope.values:
        raise BudgetProblem(f"scope must be one of {', '.join(BudgetScope.values)}")
    if not name:
        raise BudgetProblem(f"a {scope} budget names its {scope}")
    model: Any = {"user": get_user_model(), "group": Group, "agent": Agent}[scope]
    key = model.USERNAME_FIELD if scope == BudgetScope.USER else "name"
    found = model.objects.filter(**{key: name}).first()
    if found is None:
        raise BudgetProblem(f"no {scope} named {name[:80]!r}")
    return {scope: found}


BUDGET_COST = parsing.Bounds(minimum=Decimal(0), maximum=Decimal(10) ** 11, places=parsing.COST_PLACES, above=False)
MAX_COUNT = 10**15


def parse_ceiling(value: Any, *, what: str, integer: bool = False) -> Decimal | int | None:
    """A ceiling from text or a number: ``None`` (no ceiling) for ``None`` or ``""``. A cost is a
    plain decimal (``money.parsing``); tokens and runs a whole number. Raises ``BudgetProblem``."""
    if value is None or value == "":
        return None
    if not integer:
        try:
            return parsing.parse(value, BUDGET_COST)
        except parsing.InvalidAmount as exc:
            raise BudgetProblem(f"{what}: {exc}") from None
    text = str(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else ""
    if not (text.isascii() and text.isdigit() and len(text) <= 15):
        raise BudgetProblem(f"{what} must be a whole number (ASCII digits) from 0 to {MAX_COUNT}")
    return int(text)


def set_budget(
    scope: str,
    name: str | None,
    window: str,
    *,
    max_cost: Any = None,
    max_tokens: Any = None,
    max_runs: Any = None,
) -> tuple[Budget, bool]:
    """Create or change the budget of a subject for a window; ``(budget, created)``. Its counters
    are kept (a ceiling changed mid-window applies to what was spent so far)."""
    if window not in BudgetWindow.values:
        raise BudgetProblem(f"window must be one of {', '.join(BudgetWindow.values)}")
    ceilings = {
        "max_cost": parse_ceiling(max_cost, what="cost"),
        "max_tokens": parse_ceiling(max_tokens, what="tokens", integer=True),
        "max_runs": parse_ceiling(max_runs, what="runs", integer=True),
    }
    if all(v is None for v in ceilings.values()):
        raise BudgetProblem("give at least one ceiling: cost, tokens or runs")
    return Budget.objects.update_or_create(**_key(scope, name, window), defaults=ceilings)


def existing(scope: str, name: str | None, window: str) -> Budget | None:
    """The budget ``set_budget`` would change, or ``None`` when it would create one."""
    return Budget.objects.filter(**_key(scope, name, window)).first()


def _key(scope: str, name: str | None, window: str) -> dict[str, Any]:
    return {"scope": scope, "window": window, "user": None, "group": None, "agent": None, **subject_of(scope, name)}


def delete(scope: str, name: str | None, window: str | None = None) -> int:
    """Delete the budgets of a subject (of one window, or all of them); how many went."""
    subject = subject_of(scope, name)
    rows = Budget.objects.filter(scope=scope, **subject)
    if window:
        rows = rows.filter(window=window)
    return rows.delete()[1].get(Budget._meta.label, 0)


def visible_to(user: Any) -> QuerySet[Budget]:
    """Every budget for staff who may view budgets; else the budgets covering the user's runs
    (theirs, their groups', everyone's) and none of anyone else's."""
    if policy.may_see_all_budgets(user):
        return Budget.objects.select_related("user", "group", "agent")
    return covering_user(user)


def covering_user(user: Any) -> QuerySet[Budget]:
    """The budgets covering ``user``'s runs: theirs, their groups', everyone's (the playground's)."""
    return (
        Budget.objects.select_related("user", "group", "agent")
        .filter(
            Q(scope=BudgetScope.EVERYONE)
            | Q(scope=BudgetScope.USER, user=user)
            | Q(scope=BudgetScope.GROUP, group__user=user)
        )
        .distinct()
    )


def as_dict(budget: Budget) -> dict[str, Any]:
    """A budget as the API and ``agent_budgets list --json`` show it: its subject, window,
    ceilings, and its use now (spent, reserved, left, when it resets). Amounts are text."""
    u = use(budget)

    def text(value: Any) -> str | None:
        return None if value is None else f"{Decimal(value).normalize():f}"

    return {
        "id": budget.pk,
        "scope": budget.scope,
        "subject": budget.subject,
        "window": budget.window,
        "currency": app_settings.CURRENCY,
        "max_cost": text(budget.max_cost),
        "max_tokens": budget.max_tokens,
        "max_runs": budget.max_runs,
        "spent_cost": text(u.spent_cost),
        "spent_tokens": u.spent_tokens,
        "runs": u.runs,
        "reserved_cost": text(u.reserved_cost),
        "reserved_tokens": u.reserved_tokens,
        "left_cost": text(u.left_cost),
        "left_tokens": u.left_tokens,
        "left_runs": u.left_runs,
        "resets_at": u.resets_at.isoformat() if u.resets_at is not None else None,
    }
