"""What a model call costs: tokens at a price per million, in decimals (never floats)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from .steps import Usage, decimal_text


@dataclass(frozen=True)
class Price:
    """A model's price per million input (prompt) and output (completion) tokens."""

    input_per_million: Decimal
    output_per_million: Decimal
    currency: str = "USD"
    source: str = ""  # where it was set: "connection NAME" or "provider NAME"

    def cost(self, usage: Usage) -> Decimal:
        """Exactly ``prompt × input / 10⁶ + completion × output / 10⁶`` (no rounding)."""
        spent = usage.prompt_tokens * self.input_per_million + usage.completion_tokens * self.output_per_million
        return Decimal(spent).scaleb(-6)

    def priced(self, usage: Usage, *, estimated: bool = False) -> Usage:
        """``usage`` with its cost at this price (``estimated``: from estimated tokens)."""
        return dataclasses.replace(usage, cost=self.cost(usage), cost_estimated=estimated)

    def as_dict(self) -> dict[str, Any]:
        """The price as recorded on a model call's step."""
        return {
            "input_per_million": decimal_text(self.input_per_million),
            "output_per_million": decimal_text(self.output_per_million),
            "currency": self.currency,
            "source": self.source,
        }
