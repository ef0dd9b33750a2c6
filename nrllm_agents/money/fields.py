"""The form field of an amount of money (the admin's prices, the playground's cost limit): the
text read by ``parsing.parse``, nothing stripped or coerced first."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

from django import forms

from . import parsing


class AmountField(forms.Field):
    """A plain decimal within ``bounds`` (or the bounds ``bounds()`` returns, read per form)."""

    def __init__(self, *, bounds: parsing.Bounds | Callable[[], parsing.Bounds], **kwargs: Any) -> None:
        kwargs.setdefault("widget", forms.TextInput(attrs={"inputmode": "decimal", "maxlength": "64"}))
        super().__init__(**kwargs)
        self.bounds = bounds

    def to_python(self, value: Any) -> Decimal | None:
        if value in self.empty_values:
            return None
        text = value if isinstance(value, Decimal) else str(value)
        bounds = self.bounds() if callable(self.bounds) else self.bounds
        try:
            return parsing.parse(text, bounds)
        except parsing.InvalidAmount as exc:
            raise forms.ValidationError(str(exc), code="invalid") from None

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, Decimal):
            return format(value.normalize(), "f")
        return value
