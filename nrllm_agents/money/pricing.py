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
