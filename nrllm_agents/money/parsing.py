"""How an amount of money is read, on every surface: a plain decimal and nothing else.

``Decimal()`` alone is lenient: it takes ``"1_000"`` as 1000, ``" 1 "`` as 1, fullwidth digits,
exponents and ``NaN``. Money typed by a user (the API's ``max_cost``, the admin's prices, the
playground's cost limit, ``agent_prices set``) is read here instead: ASCII digits with at most
one dot, within the bounds of what it is. JSON numbers pass through the same text (``0.5`` is
``"0.5"``; ``1e-05`` is refused). Plain Python, no Django.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

_PLAIN = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)", re.ASCII)
_MAX_CHARS = 64  # longer than any amount within bounds: refused before the pattern reads it
PRICE_PLACES = 6  # the Price columns' decimal places
COST_PLACES = 12  # the run's max_cost column's decimal places
MAX_PRICE = Decimal("1000000")


class InvalidAmount(ValueError):
    """Not a plain decimal within the bounds; the message says what is expected, never echoes input."""


@dataclass(frozen=True)
class Bounds:
    """What an amount may be: from ``minimum`` (excluded when ``above``) to ``maximum``, with at
    most ``places`` decimal places."""

    minimum: Decimal = Decimal(0)
    maximum: Decimal | None = None
    places: int = COST_PLACES
    above: bool = True

    def words(self) -> str:
        """``a plain decimal (ASCII digits, at most one dot) above 0 and at most 1000000, …``."""
        low = f"{'above' if self.above else 'from'} {_plain(self.minimum)}"
        high = "" if self.maximum is None else f" {'and at most' if self.above else 'to'} {_plain(self.maximum)}"
        return f"a plain decimal (ASCII digits, at most one dot) {low}{high}, at most {self.places} decimal places"


PRICE = Bounds(minimum=Decimal(0), maximum=MAX_PRICE, places=PRICE_PLACES, above=False)
"""A price per million tokens (``agent_prices set``, the admin's prices)."""


def cost_limit(maximum: Any) -> Bounds:
    """The bounds of a run's ``max_cost``: above 0, at most ``maximum`` (``MAX_COST_LIMIT``)."""
    return Bounds(maximum=parse(maximum, Bounds(places=COST_PLACES)), places=COST_PLACES)


def parse(value: Any, bounds: Bounds) -> Decimal:
    """``value`` (a string, an int, a float or a ``Decimal``) as a ``Decimal`` within ``bounds``.

    Trailing zeros past ``bounds.places`` are dropped (``"1.50000000"`` is ``1.500000`` for a
    price), so the amount fits its column's decimal places as the text fitted the bounds.
    Raises ``InvalidAmount`` for anything that is not a plain decimal (signs, exponents,
    underscores, spaces, non-ASCII digits, ``NaN``, booleans, other types) or lies outside.
    """
    amount = _decimal(value)
    if amount is None or not _within(amount, bounds):
        raise InvalidAmount(bounds.words())
    places = amount.as_tuple().exponent
    if isinstance(places, int) and -places > bounds.places:  # only zeros there: _within said so
        return amount.quantize(Decimal(1).scaleb(-bounds.places))
    return amount


def _decimal(value: Any) -> Decimal | None:
    if isinstance(value, Decimal):
        return value if value.is_finite() and not value.is_signed() else None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    text = value if isinstance(value, str) else str(value)
    if len(text) > _MAX_CHARS or not _PLAIN.fullmatch(text):
        return None
    return Decimal(text)


def _within(amount: Decimal, bounds: Bounds) -> bool:
    exponent = amount.normalize().as_tuple().exponent
    if not isinstance(exponent, int) or -exponent > bounds.places:
        return False
    if amount < bounds.minimum or (bounds.above and amount == bounds.minimum):
        return False
    return bounds.maximum is None or amount <= bounds.maximum


def _plain(value: Decimal) -> str:
    return format(value.normalize(), "f")
