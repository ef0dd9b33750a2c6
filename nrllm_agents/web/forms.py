"""The playground's run form: HTML input turned into a validated ``RunRequest``."""

from __future__ import annotations

from typing import Any, cast

from django import forms

from ..access import policy
from ..catalog import registry
from ..conf import app_settings
from ..domain import jsonlimits
from ..money import parsing
from ..money.fields import AmountField
from ..validation.run_request import MAX_PROMPT_CHARS, InvalidRequest, RunRequest

SCRIPT_HELP = (
    "Optional, scripted provider only. A JSON list of turns, e.g. "
    '[{"delay": 0.5, "tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}]}, '
    '{"content": "42"}]'
)


def script_value(text: str | None) -> Any:
    """A script field's JSON (bounded by ``jsonlimits``); ``None`` when empty."""
    text = (text or "").strip()
    if not text:
        return None
    try:
        return jsonlimits.loads(text)
    except jsonlimits.JSONRefused as exc:
        raise forms.ValidationError(str(exc)) from None


class _Offered(forms.ChoiceField):
    """A choice among the rows the user may use, that takes any name: the run request says an
    unknown one is unknown, and the policy refuses one the user may not use in its own words."""

    def valid_value(self, value: Any) -> bool:
        return True


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
    max_cost = AmountField(
        required=False,
        bounds=lambda: parsing.cost_limit(app_settings.MAX_COST_LIMIT),
        label="Cost limit",
        help_text="Cancel the run after the model call that costs more in total (in the configured currency). "
        "Empty: the default.",
    )
    connection = _Offered(
        required=False, help_text="Run through a connection (its kind is the provider). Empty: the provider above."
    )
    agent = _Offered(
        required=False,
        help_text="Start from an agent: its definition sets the provider or connection, model, tools, "
        "iterations and instructions (the limits and a model given here win).",
    )
    script = forms.CharField(
        required=False, help_text=SCRIPT_HELP, widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"})
    )
    mode = forms.ChoiceField(choices=MODES, initial="interactive", widget=forms.RadioSelect)

    def __init__(self, *args: Any, user: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        offered = policy.offered_providers(registry.provider_names())  # no test double in production
        cast(forms.ChoiceField, self.fields["provider"]).choices = [(p, p) for p in offered]
        self.fields["provider"].initial = (
            app_settings.DEFAULT_PROVIDER if app_settings.DEFAULT_PROVIDER in offered else ""
        )
        cast(forms.ChoiceField, self.fields["tools"]).choices = [
            (t, t) for t in registry.tool_names()
        ]  # MCP tools too: the process's catalog, never a wait on a server
        self.fields["tools"].initial = list(app_settings.DEFAULT_TOOLS)
        self.tool_groups = tool_groups()
        cast(forms.IntegerField, self.fields["max_iterations"]).max_value = app_settings.MAX_ITERATIONS_LIMIT
        self.fields["max_iterations"].initial = app_settings.DEFAULT_MAX_ITERATIONS
        # only what ``user`` may use is offered (``policy.usable_*``)
        names = policy.usable_connections(user).values_list("name", flat=True)
        cast(forms.ChoiceField, self.fields["connection"]).choices = [("", "—"), *((n, n) for n in names)]
        cast(forms.ChoiceField, self.fields["agent"]).choices = [
            ("", "—"),
            *((n, n) for n in policy.usable_agents(user).values_list("name", flat=True)),
        ]
        self.run_request: RunRequest | None = None

    def clean_script(self) -> Any:
        return script_value(self.cleaned_data.get("script"))

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if self.errors:
            return data
        mapping = {k: data[k] for k in ("prompt", "provider", "model", "tools", "max_iterations")}
        mapping.update(
            {k: data[k] for k in ("deadline_seconds", "max_total_tokens", "max_cost") if data.get(k) is not None}
        )
        if data.get("connection"):
            mapping["connection"] = data["connection"]
            mapping.pop("provider")  # the connection's kind is the provider
        if data.get("agent"):
            mapping["agent"] = data["agent"]
            for name in ("provider", "tools", "max_iterations"):  # the agent's, unless a connection is chosen
                mapping.pop(name, None)
            if not mapping.get("model"):
                mapping.pop("model", None)
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


class ForkForm(forms.Form):
    """What a fork from the playground may change (``runtime.fork``'s ``overrides``); every
    field empty: the parent's values are copied. The runtime validates the values it gets."""

    model = forms.CharField(required=False, max_length=200)
    max_iterations = forms.IntegerField(required=False, min_value=1, label="Max iterations")
    deadline_seconds = forms.IntegerField(required=False, min_value=1, label="Deadline (s)")
    max_total_tokens = forms.IntegerField(required=False, min_value=1, label="Token budget")
    script = forms.CharField(
        required=False,
        label="Script (JSON)",
        help_text="Scripted provider only: the turns the fork plays from its next model call.",
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
    )

    def clean_script(self) -> Any:
        return script_value(self.cleaned_data.get("script"))

    def overrides(self) -> dict[str, Any]:
        """The fields given, as ``runtime.fork`` overrides; ``{}`` when nothing changes."""
        data = self.cleaned_data
        given = {k: data[k] for k in ("max_iterations", "deadline_seconds", "max_total_tokens", "script")}
        changes = {k: v for k, v in given.items() if v is not None}
        if data.get("model"):
            changes["model"] = data["model"]
        return changes


# the project's own tools (an app's ``agent_tools``, or named in NRLLM_AGENTS["TOOLS"]) come
# first, then the built-in ones, then each MCP server's
PROJECT, BUILT_IN = "project", "built-in"
_FIRST = {PROJECT: 0, BUILT_IN: 1}


def tool_groups() -> list[dict[str, Any]]:
    """The tools a run can be offered, grouped by where they come from (the project's own, the
    built-in ones, then each MCP server), each with its description and whether it needs
    approval: the form lists them so, the first two groups open."""
    entries, _ = registry.offered_tools()
    groups: dict[str, dict[str, Any]] = {}
    for entry in entries:
        server = entry["server"]
        if server:
            key, label = f"mcp:{server}", f"MCP server {server}"
        elif entry["source"] in ("app", "settings"):
            key, label = PROJECT, "Your project's tools"
        else:
            key, label = BUILT_IN, "Built-in"
        group = groups.setdefault(key, {"key": key, "label": label, "open": key in _FIRST, "tools": []})
        group["tools"].append(
            {**entry, "short": entry["name"].removeprefix(f"{server}__") if server else entry["name"]}
        )
    return sorted(groups.values(), key=lambda g: (_FIRST.get(g["key"], 2), g["label"]))
