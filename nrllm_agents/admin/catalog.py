"""The admin of what runs are set up with: connections (their key write-only), prices, agents,
and who may use a connection or an agent (users and groups; none named: every signed-in user).

Who may view, add, change and delete them is ``policy.may_configure``'s decision. A
connection's key is a password field that never renders its value: leaving it empty keeps
the stored key, "clear the key" removes it; no page, list or message shows it. Its URL's
credentials show as ``***``. Staff who may only view a connection see neither field: the
read-only page names only what may be shown (the admin would otherwise read each name off
the model, and ``Connection.api_key()`` decrypts).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from ..access import policy
from ..catalog import agents, connections
from ..crypto.vault import VaultError
from ..models import Agent, AgentVersion, Connection, Price
from ..money import parsing
from ..money.fields import AmountField
from .bases import AgentModelForm, AgentVersionTabularInline, AnyModelAdmin, ConnectionModelForm


class _Configured(AnyModelAdmin):
    """Permissions from ``policy.may_configure`` for the model this admin serves."""

    def _may(self, request: HttpRequest, action: policy.Setup) -> bool:
        return policy.may_configure(request.user, action, self.model._meta.model_name or "")

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self._may(request, policy.Setup.VIEW)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._may(request, policy.Setup.VIEW)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self._may(request, policy.Setup.ADD)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._may(request, policy.Setup.CHANGE)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._may(request, policy.Setup.DELETE)


class ConnectionForm(ConnectionModelForm):
    base_url = forms.URLField(
        max_length=500,
        assume_scheme="https",
        help_text="Where the key is sent. Its user and password (user:password@) show as ***: "
        "leave *** to keep them, or type the URL whole to change them.",
    )
    api_key = forms.CharField(
        required=False,
        strip=True,
        max_length=4000,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Write-only: never shown again. Leave empty to keep the stored key.",
    )
    clear_key = forms.BooleanField(required=False, label="Clear the key", help_text="Store no key any more.")

    class Meta:
        model = Connection
        fields = ("name", "kind", "base_url", "default_model", "allowed_users", "allowed_groups")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.initial["base_url"] = connections.shown_url(self.instance)

    def clean_base_url(self) -> str:
        try:  # runs before the form writes into the instance: it still holds the stored URL
            return connections.given_url(self.instance if self.instance.pk else None, self.cleaned_data["base_url"])
        except VaultError as exc:
            raise forms.ValidationError(str(exc)) from None

    def save(self, commit: bool = True) -> Connection:
        row: Connection = super().save(commit=False)
        row.set_url(self.cleaned_data["base_url"])
        if self.cleaned_data.get("clear_key"):
            row.set_key(None)
        elif self.cleaned_data.get("api_key"):
            row.set_key(self.cleaned_data["api_key"])
        if commit:
            row.save()
        return row


@admin.register(Connection)
class ConnectionAdmin(_Configured):
    form = ConnectionForm
    list_display = ("name", "kind", "address", "default_model", "key_state", "updated_at")
    search_fields = ("name", "default_model")  # not the URL: a search would test guesses of its password
    fields = (
        "name",
        "kind",
        "base_url",
        "default_model",
        "key_state",
        "api_key",
        "clear_key",
        "allowed_users",
        "allowed_groups",
    )
    readonly_fields = ("key_state",)
    filter_horizontal = ("allowed_users", "allowed_groups")  # who may use it (``policy.may_use_connection``)

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is not None and not self.has_change_permission(request, obj):
            # no secret's name to look up
            return ("name", "kind", "address", "default_model", "key_state", "allowed_users", "allowed_groups")
        return super().get_fields(request, obj)

    @admin.display(description="base URL", ordering="base_url")
    def address(self, row: Connection) -> str:
        return connections.shown_url(row)

    @admin.display(description="key")
    def key_state(self, row: Connection) -> str:
        return "set (write-only)" if row.has_key else "none"


@admin.register(Price)
class PriceAdmin(_Configured):
    list_display = ("model", "connection", "provider", "input_per_million", "output_per_million", "updated_at")
    list_filter = ("connection", "provider")
    search_fields = ("model",)
    fields = ("connection", "provider", "model", "input_per_million", "output_per_million")

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name in ("input_per_million", "output_per_million"):
            return AmountField(
                bounds=parsing.PRICE,
                label=db_field.verbose_name.capitalize(),
                help_text="Per million tokens, in NRLLM_AGENTS['CURRENCY']; new calls use it, past ones keep theirs.",
            )
        return super().formfield_for_dbfield(db_field, request, **kwargs)


class AgentForm(AgentModelForm):
    definition = forms.JSONField(
        initial=dict,
        help_text="Run request fields the agent sets (system, connection, provider, model, tools, max_iterations, "
        "on_deny, deadline_seconds, max_total_tokens, max_cost). Saving adds a version; runs keep theirs.",
        widget=forms.Textarea(attrs={"rows": 12, "spellcheck": "false"}),
    )

    class Meta:
        model = Agent
        fields = ("name", "description", "allowed_users", "allowed_groups")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        latest = self.instance.latest() if self.instance.pk else None
        if latest is not None:
            self.fields["definition"].initial = latest.definition

    def clean_definition(self) -> dict[str, Any]:
        try:
            return agents.validated(self.cleaned_data.get("definition"))
        except agents.InvalidAgent as exc:
            raise forms.ValidationError(str(exc)) from None


class AgentVersionInline(AgentVersionTabularInline):
    model = AgentVersion
    fields = ("version", "definition", "created_at", "created_by")
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ("-version",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Agent)
class AgentAdmin(_Configured):
    form = AgentForm
    list_display = ("name", "description", "latest_version", "updated_at")
    search_fields = ("name", "description")
    inlines = [AgentVersionInline]
    filter_horizontal = ("allowed_users", "allowed_groups")  # who may use it (``policy.may_use_agent``)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        return ("name",) if obj is not None else ()

    @admin.display(description="version")
    def latest_version(self, agent: Agent) -> int | None:
        latest = agent.latest()
        return latest.version if latest else None

    def save_model(self, request: HttpRequest, obj: Agent, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        agents.save(obj.name, form.cleaned_data["definition"], by=request.user)
