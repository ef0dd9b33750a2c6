"""The admin of the shared budgets: their ceilings are edited here, their use is shown (the
counters are ``store.budgets``' alone, read-only here)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from ..catalog import budgets
from ..models import Budget
from ..money.fields import AmountField
from .bases import AnyModelAdmin


class CeilingField(forms.Field):
    """A whole-number ceiling (tokens, runs), read by the parser the API and ``agent_budgets``
    use (``budgets.parse_ceiling``): ASCII digits only, nothing stripped or coerced first."""

    def __init__(self, *, what: str, **kwargs: Any) -> None:
        kwargs.setdefault("widget", forms.TextInput(attrs={"inputmode": "numeric", "maxlength": "20"}))
        super().__init__(**kwargs)
        self.what = what

    def to_python(self, value: Any) -> int | None:
        try:
            ceiling = budgets.parse_ceiling(value, what=self.what, integer=True)
        except budgets.BudgetProblem as exc:
            raise forms.ValidationError(str(exc), code="invalid") from None
        return None if ceiling is None else int(ceiling)


@admin.register(Budget)
class BudgetAdmin(AnyModelAdmin):
    list_display = (
        "__str__",
        "scope",
        "window",
        "max_cost",
        "max_tokens",
        "max_runs",
        "spent",
        "reserved",
        "left",
        "resets",
    )
    list_filter = ("scope", "window")
    search_fields = ("user__username", "group__name", "agent__name")
    fields = ("scope", "user", "group", "agent", "window", "max_cost", "max_tokens", "max_runs")
    raw_id_fields = ("user",)

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "max_cost":  # a plain decimal, as everywhere money is typed (money.parsing)
            return AmountField(
                bounds=budgets.BUDGET_COST,
                required=False,
                label="Max cost",
                help_text="The ceiling on cost, in NRLLM_AGENTS['CURRENCY']. Empty: no ceiling on cost.",
            )
        if db_field.name in ("max_tokens", "max_runs"):
            what = db_field.name.removeprefix("max_")
            return CeilingField(
                what=what,
                required=False,
                label=db_field.verbose_name.capitalize(),
                help_text=f"The ceiling on {what}, a whole number. Empty: no ceiling on {what}.",
            )
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    @admin.display(description="spent")
    def spent(self, obj: Budget) -> str:
        d = budgets.as_dict(obj)
        return f"{d['spent_cost']} {d['currency']} / {d['spent_tokens']} tokens / {d['runs']} runs"

    @admin.display(description="reserved (in flight)")
    def reserved(self, obj: Budget) -> str:
        d = budgets.as_dict(obj)
        return f"{d['reserved_cost']} / {d['reserved_tokens']} tokens"

    @admin.display(description="left")
    def left(self, obj: Budget) -> str:
        d = budgets.as_dict(obj)
        parts = [f"{d['left_cost']} {d['currency']}" if d["left_cost"] is not None else ""]
        parts += [f"{d['left_tokens']} tokens" if d["left_tokens"] is not None else ""]
        parts += [f"{d['left_runs']} runs" if d["left_runs"] is not None else ""]
        return " / ".join(p for p in parts if p) or "-"

    @admin.display(description="resets at")
    def resets(self, obj: Budget) -> Any:
        return budgets.as_dict(obj)["resets_at"] or "never"
