"""A call in doubt, for the people who decide on it: the playground's run page and the admin's.

A run whose worker was lost during a non-idempotent call waits with that call in doubt
(``suspended_state["in_doubt"]``): it may or may not have happened. Both pages show the call
(``call_in_doubt``) and take one decision through ``ResolveForm``: *it happened*, with the
result to record (JSON), or *it did not happen* (the call is made again); the third decision is
the run's cancel. The runtime (``AgentRuntime.resolve``) decides what each does; the form only
turns what a person typed into its arguments, or into a message that says what is wrong.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms

from ..domain import jsonlimits
from ..models import AgentRun, RunStatus
from ..store import reason_problem
from .display import absolute

HAPPENED, NOT_HAPPENED = "happened", "not_happened"
RESULT_HELP = 'What the call returned, as JSON (e.g. {"charge": "ch_123"}, or null): the model reads it as the result.'


def call_in_doubt(run: AgentRun) -> dict[str, Any] | None:
    """The call ``run`` waits on a decision for (its tool, its arguments as indented JSON, when it
    started), or ``None`` when the run does not wait with a call in doubt."""
    state: Any = run.suspended_state if run.status == RunStatus.WAITING_FOR_APPROVAL else None
    doubt: Any = state.get("in_doubt") if isinstance(state, dict) else None
    if not isinstance(doubt, dict):
        return None
    call: dict[str, Any] = doubt["call"] if isinstance(doubt.get("call"), dict) else {}
    at: str = doubt["at"] if isinstance(doubt.get("at"), str) else ""
    return {
        "name": str(call.get("name") or "?"),
        "call_id": str(call.get("id") or ""),
        "arguments": json.dumps(call.get("arguments") or {}, indent=2, ensure_ascii=False, default=str),
        "at": at,  # ISO, for <time datetime>
        "at_text": absolute(at) or "unknown",
    }


class ResolveForm(forms.Form):
    """A person's decision on a call in doubt: which, the result when it happened, and why."""

    decision = forms.ChoiceField(
        choices=[(HAPPENED, "It happened"), (NOT_HAPPENED, "It did not happen: make the call again")],
        error_messages={
            "required": "Choose: it happened, or it did not.",
            "invalid_choice": "Choose: it happened, or it did not.",
        },
    )
    result = forms.CharField(
        required=False,
        strip=True,
        help_text=RESULT_HELP,
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
    )
    reason = forms.CharField(required=False, strip=True)  # its bound in ``reason_problem``'s words

    def clean_reason(self) -> str:
        reason = self.cleaned_data.get("reason") or ""
        problem = reason_problem(reason)
        if problem is not None:  # refused, never silently cut
            raise forms.ValidationError(problem)
        return reason

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if self.errors or data.get("decision") != HAPPENED:
            return data
        text = data.get("result") or ""
        if not text:
            self.add_error("result", "the call's result is needed when it happened: its JSON (write null for none)")
            return data
        try:
            value = jsonlimits.loads(text)
        except jsonlimits.JSONRefused as exc:
            self.add_error("result", str(exc))
            return data
        if jsonlimits.value_too_large(value):
            self.add_error("result", f"too large: {jsonlimits.SIZE_ERROR}")
            return data
        data["value"] = value
        return data

    @property
    def happened(self) -> bool:
        return bool(self.cleaned_data["decision"] == HAPPENED)

    def problem(self) -> str:
        """The form's errors in one sentence, each named by its field (``result: not valid JSON: ...``)."""
        return "; ".join(
            f"{name}: {' '.join(str(e) for e in errors)}" if name != "__all__" else " ".join(str(e) for e in errors)
            for name, errors in self.errors.items()
        )


def decided_text(happened: bool, name: str) -> str:
    """What a decision said, in the words both pages answer with."""
    if happened:
        return f"Recorded: the call of {name} happened; its result is recorded and it is not made again"
    return f"Recorded: the call of {name} did not happen; it is made again"
