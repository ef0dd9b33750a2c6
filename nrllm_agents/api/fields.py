"""Strict input parsing: what the schema says is invalid is rejected, not coerced.

DRF is lenient by design (``"yes"`` is a boolean, ``42`` a string, an integer a UUID, an empty
query parameter an absent one, a naive time a local one). Here the served OpenAPI schema is
the contract, so input that breaks it answers 400 rather than being quietly reinterpreted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from django.http import QueryDict
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ..conf import app_settings
from ..money import parsing

# RFC 3339 date-time, as OpenAPI's "date-time" format means it: seconds and an offset required.
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")
_DIGITS = re.compile(r"[0-9]{1,10}")


class StrictCharField(serializers.CharField):
    """A string, and only a string."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """``true`` or ``false``; not ``"yes"``, ``1`` or ``"on"``."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer; not a string of digits, not a boolean."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictFloatField(serializers.FloatField):
    """A JSON number; not a string, not a boolean."""

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictUUIDField(serializers.UUIDField):
    """A UUID in its text form; not an integer."""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            self.fail("invalid", value=data)
        return super().to_internal_value(data)


class StrictDateTimeField(serializers.DateTimeField):
    """An RFC 3339 date-time with an explicit offset, e.g. ``2030-01-31T08:00:00Z``."""

    default_error_messages = {"rfc3339": "Use an RFC 3339 date-time with an offset, e.g. 2030-01-31T08:00:00Z."}

    def to_internal_value(self, value: Any) -> Any:
        if not isinstance(value, str) or not _RFC3339.fullmatch(value):
            self.fail("rfc3339")
        return super().to_internal_value(value)


@extend_schema_field({"type": "string", "pattern": r"^(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)$", "example": "0.50"})
class CostField(serializers.Field):  # type: ignore[type-arg]
    """A run's cost limit: a plain decimal (``money.parsing``), as a string (or a JSON number),
    above 0 and at most ``MAX_COST_LIMIT``; not ``"1_000"``, ``" 1 "``, ``"1e3"`` or ``"１"``."""

    def to_internal_value(self, data: Any) -> Any:
        try:
            return parsing.parse(data, parsing.cost_limit(app_settings.MAX_COST_LIMIT))
        except parsing.InvalidAmount as exc:
            raise serializers.ValidationError(str(exc)) from None

    def to_representation(self, value: Any) -> Any:
        return format(value.normalize(), "f")


def query_data(params: QueryDict, lists: Iterable[str] = ()) -> dict[str, Any]:
    """Query parameters as plain data: the ``lists`` names as lists, the rest as their last value.

    A plain mapping (not a ``QueryDict``) makes DRF validate ``?after=`` as an empty value
    instead of treating it as absent.
    """
    lists = set(lists)
    return {key: params.getlist(key) if key in lists else params[key] for key in params}


def positive_int(raw: str | None, *, name: str, maximum: int) -> int | None:
    """``raw`` as an integer from 1 to ``maximum``; ``None`` when absent; else a 400 naming ``name``."""
    if raw is None:
        return None
    if not _DIGITS.fullmatch(raw) or not 1 <= int(raw) <= maximum:
        raise serializers.ValidationError({name: [f"an integer from 1 to {maximum}"]})
    return int(raw)
