"""Spend in money, as the console shows it: one formatter, and the hooks the totals read.

A run's cost comes from the providers' prices (another module computes it): on the run's status
dict as ``cost`` = ``{"amount": "0.0123", "currency": "USD"}``, and on each ``llm`` step's
payload as ``cost`` (a decimal string, with ``estimated`` when the call was interrupted).
Everything here reads those shapes and shows nothing when they are absent: tokens are always
shown beside, so a run without prices still says what it spent.

The admin's totals sum a database column: ``COST_FIELD`` names the ``AgentRun`` field holding a
run's cost (a decimal), or ``None`` while runs have none (the cost columns then show ``—``).
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal, InvalidOperation
from typing import Any

DEFAULT_CURRENCY = "USD"


def decimal(value: Any) -> Decimal | None:
    """``value`` (a decimal string, number or ``{"amount": …}``) as a ``Decimal``; ``None`` if not one."""
    if isinstance(value, dict):
        value = value.get("amount")
    if value is None or isinstance(value, bool):
        return None
    try:
        number = Decimal(str(value))
    except (InvalidOperation, ValueError):
        return None
    return number if number.is_finite() else None


def text(amount: Any, currency: str | None = None, *, estimated: bool = False) -> str | None:
    """``0.0000125 USD``: the amount exactly as recorded (a cost is tokens × price, kept as a
    decimal; rounding it for show would say a run of a few tokens cost nothing), ``~`` in front
    when part of it was priced from estimated tokens; ``None`` when there is no amount."""
    if isinstance(amount, dict):
        currency = currency or amount.get("currency")
        estimated = estimated or bool(amount.get("estimated"))
    number = decimal(amount)
    if number is None:
        return None
    body = f"{number.normalize():f} {currency or default_currency()}"
    return f"~{body}" if estimated else body


def default_currency() -> str:
    from ..conf import app_settings

    return str(app_settings.CURRENCY or DEFAULT_CURRENCY)


def run_cost(status: dict[str, Any]) -> str | None:
    """The money a run spent, from its status dict (``presenters.run_status_dict``)."""
    return text(status.get("cost"))


def steps_cost(payloads: Iterable[Any]) -> str | None:
    """The money of the ``llm`` steps' payloads together; ``~`` when one was estimated."""
    total, seen, estimated = Decimal(0), False, False
    for payload in payloads:
        if not isinstance(payload, dict):
            continue
        usage = payload.get("usage")
        if not isinstance(usage, dict):
            usage = {}
        number = decimal(usage.get("cost"))  # the loop records a priced call's cost in its usage
        if number is None:
            continue
        total, seen = total + number, True
        estimated = estimated or bool(usage.get("cost_estimated"))
    return text(total, estimated=estimated) if seen else None


def run_cost_text(cost: dict[str, Any] | None) -> str:
    """A run's cost (``presenters.run_status_dict``'s ``cost``): ``0.0042 USD``, ``… (estimated
    in part)``, or ``not priced``."""
    shown = text(cost.get("amount"), cost.get("currency")) if cost else None
    if cost is None or shown is None:
        return "not priced"
    return shown + (" (estimated in part)" if cost.get("estimated") else "")
