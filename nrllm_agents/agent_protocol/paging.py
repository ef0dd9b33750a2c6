"""``limit`` and ``offset`` of a search body or a query string, bounded; else a 422."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..validation.run_request import InvalidRequest

MAX_LIMIT = 1000
MAX_OFFSET = 10**6


def _bounded(value: Any, name: str, default: int, low: int, high: int) -> int:
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise InvalidRequest({name: f"an integer from {low} to {high}"}) from None
    if isinstance(value, bool) or not low <= number <= high:
        raise InvalidRequest({name: f"an integer from {low} to {high}"})
    return number


def page_of(data: Mapping[str, Any], default: int = 10) -> tuple[int, int]:
    """``(limit, offset)``."""
    return (
        _bounded(data.get("limit"), "limit", default, 1, MAX_LIMIT),
        _bounded(data.get("offset"), "offset", 0, 0, MAX_OFFSET),
    )
