"""The price in force for a run's model, and the run's cost as every surface shows it.

A segment resolves its price once, when it starts (``resolve``): one query, none at the step
boundaries. The tool loop then records each call's cost, at that price, on the call's ``llm``
step, and the run's total on its row, so a price changed later changes no recorded cost. A
price set for the run's connection wins over one set for its provider (the connection's kind,
or the environment-configured provider's name).
"""

from __future__ import annotations

import logging
from decimal import Decimal
from typing import Any

from django.db import DatabaseError
from django.db.models import Q

from ..conf import app_settings
from ..domain import Price
from ..domain.steps import decimal_text
from ..models import AgentRun, Connection
from ..models import Price as PriceRow
from .amounts import run_cost_text

logger = logging.getLogger(__name__)


def resolve(provider: str, model: str, connection: str = "") -> Price | None:
    """The price of ``model`` through ``connection`` (by name) or ``provider``, else ``None``.

    Fail-soft: a store error answers ``None`` (the calls go unpriced, the run goes on).
    """
    where = Q(connection__isnull=True, provider=provider)
    if connection:
        where |= Q(connection__name=connection)
    try:
        rows = list(PriceRow.objects.filter(where, model=model).select_related("connection")[:2])
    except DatabaseError as exc:
        logger.warning("price of %s/%s could not be read (%s); calls go unpriced", provider, model, type(exc).__name__)
        return None
    if not rows:
        return None
    row = min(rows, key=lambda r: r.connection is None)  # the connection's own price first
    return Price(
        input_per_million=row.input_per_million,
        output_per_million=row.output_per_million,
        currency=app_settings.CURRENCY,
        source=f"connection {row.connection.name}" if row.connection is not None else f"provider {row.provider}",
    )


def for_request(request: Any) -> Price | None:
    """The price in force for a run request's model (``RunRequest``)."""
    model = request.model or ("scripted-demo" if request.provider == "scripted" else "")
    return resolve(request.provider, model, request.connection or "") if model else None


def cost_dict(run: AgentRun) -> dict[str, Any] | None:
    """A run's cost as ``{"amount", "currency", "estimated"}``, or ``None`` while unpriced."""
    if run.cost is None:
        return None
    return {
        "amount": decimal_text(Decimal(run.cost).normalize()),
        "currency": app_settings.CURRENCY,
        "estimated": bool(run.cost_estimated),
    }


def cost_text(run: AgentRun) -> str:
    """The run's cost in words (``amounts.run_cost_text``)."""
    return run_cost_text(cost_dict(run))


def for_run(run: AgentRun) -> Price | None:
    """The price in force now for a run's model (the one its next model call is costed at)."""
    model = run.model or ("scripted-demo" if run.provider == "scripted" else "")
    return resolve(run.provider, model, run.connection or "") if model else None


def price_text(price: Price) -> str:
    """``3 / 15 USD per million tokens in / out``."""

    def shown(amount: Any) -> str:
        return f"{Decimal(amount).normalize():f}"

    rates = f"{shown(price.input_per_million)} / {shown(price.output_per_million)}"
    return f"{rates} {price.currency} per million tokens in / out"


def running_cost_text(run: AgentRun, spent: str | None) -> str:
    """While a run executes: what its recorded steps spent (``spent``, ``amounts.steps_cost``),
    marked "so far", with the price in force; ``not priced`` when its model has no price."""
    price = for_run(run)
    if price is None:
        return f"{spent} so far" if spent else "not priced"
    so_far = f"{spent} so far" if spent else f"0 {price.currency} so far"
    return f"{so_far} (at {price_text(price)})"


def set_price(
    *,
    model: str,
    input_per_million: Decimal,
    output_per_million: Decimal,
    connection: Connection | None = None,
    provider: str = "",
) -> tuple[PriceRow, bool]:
    """Create or change the price of ``model`` via ``connection`` or ``provider``; ``(row, created)``."""
    key = (
        {"connection": connection, "provider": ""}
        if connection is not None
        else {"connection": None, "provider": provider}
    )
    return PriceRow.objects.update_or_create(
        **key, model=model, defaults={"input_per_million": input_per_million, "output_per_million": output_per_million}
    )
