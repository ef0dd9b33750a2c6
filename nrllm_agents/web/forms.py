"""The playground's run form: HTML input turned into a validated ``RunRequest``."""

from __future__ import annotations

import json
from typing import Any

from django import forms

from .. import registry
from ..conf import app_settings
from ..jsonlimits import DEPTH_ERROR, text_too_deep
from ..run_request import MAX_PROMPT_CHARS, InvalidRequest, RunRequest

SCRIPT_HELP = (
    "Optional, scripted provider only. A JSON list of turns, e.g. "
    '[{"delay": 0.5, "tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}]}, '
    '{"content": "42"}]'
)


class RunForm(forms.Form):
    """Prompt, provider, model, tools, max iterations, optional script, and where to execute.

    ``clean`` validates through ``RunRequest.from_mapping``, so the form accepts exactly
    what every other surface accepts; its per-field errors land on the matching fields.
    """

    MODES = [("interactive", "Interactive (executes in this web process)"), ("queued", "Queued (a worker executes it)")]

    prompt = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), max_length=MAX_PROMPT_CHARS)
    provider = forms.ChoiceField()
    model = forms.CharField(required=False, max_length=200)
    tools = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple)
    max_iterations = forms.IntegerField(min_value=1)
    deadline_seconds = forms.IntegerField(
        required=False,
        min_value=1,
        label="Deadline (s)",
        help_text="Cancel the run after this many seconds (approval waits excluded). Empty: the default.",
    )
    max_total_tokens = forms.IntegerField(
        required=False,
        min_value=1,
        label="Token budget",
        help_text="Cancel the run after the model call that spends more. Empty: the default.",
    )
    script = forms.CharField(
        required=False, help_text=SCRIPT_HELP, widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"})
    )
    mode = forms.ChoiceField(choices=MODES, initial="interactive", widget=forms.RadioSelect)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["provider"].choices = [(p, p) for p in registry.provider_names()]
        self.fields["provider"].initial = app_settings.DEFAULT_PROVIDER
        self.fields["tools"].choices = [(t, t) for t in registry.tool_names(discover=True)]  # MCP tools too
        self.fields["tools"].initial = list(app_settings.DEFAULT_TOOLS)
        self.fields["max_iterations"].max_value = app_settings.MAX_ITERATIONS_LIMIT
        self.fields["max_iterations"].initial = app_settings.DEFAULT_MAX_ITERATIONS
        self.run_request: RunRequest | None = None

    def clean_script(self) -> Any:
        text = (self.cleaned_data.get("script") or "").strip()
        if not text:
            return None
        if text_too_deep(text):
            raise forms.ValidationError(DEPTH_ERROR)
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if self.errors:
            return data
        mapping = {k: data[k] for k in ("prompt", "provider", "model", "tools", "max_iterations")}
        mapping.update({k: data[k] for k in ("deadline_seconds", "max_total_tokens") if data.get(k) is not None})
        if data.get("script") is not None:
            mapping["script"] = data["script"]
        try:
            self.run_request = RunRequest.from_mapping(mapping)
        except InvalidRequest as exc:
            for name, message in exc.errors.items():
                self.add_error(name if name in self.fields else None, message)
        return data

    @property
    def queued(self) -> bool:
        return self.cleaned_data.get("mode") == "queued"
