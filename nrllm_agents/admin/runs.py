"""The runs admin: a read-only list and page per run, its step timeline, cancel actions, and the
decision on a call in doubt (``resolve.py``).

Who may see and cancel which run is ``nrllm_agents.access.policy``'s decision, as on every other
surface: staff see every run; they cancel their own runs, and other users' runs with the
dedicated ``nrllm_agents.cancel_agentrun`` permission. Runs are
never added, edited or deleted here: a run is the audit record of what an agent did, its
step stream is append-only, and deleting a run would pull the row from under a segment that
may still be executing it (retention is a job for a data-retention task, not a click).

Works the same on Django 5.2 LTS and 6.x: the list's cancel is a standard changelist action,
and a run's page cancels through its own admin URL (``<id>/cancel/``) rather than a
change-form action (``ActionLocation.CHANGE_FORM``), which Django 5.2 does not have.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import update_wrapper
from typing import Any

from django.contrib import admin
from django.contrib.admin import helpers
from django.contrib.admin.utils import flatten_fieldsets
from django.db.models import Count, F, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse
from django.template.defaultfilters import truncatechars
from django.template.response import SimpleTemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _

from ..access import policy
from ..models import AgentRun, AgentRunEvent, RunStatus
from ..money import pricing
from ..observability import gantt
from ..presentation import describe
from ..presentation.outcomes import EXECUTING_STOPS
from ..presentation.presenters import run_status_dict, stream_finished
from ..runtime.agent_runtime import InvalidRunId, parse_run_id
from ..web import doubt
from ..web.display import spend_text
from . import columns, listing, timeline
from .fork import fork_selected
from .operations import HealthFilter, operations_page
from .resolve import RunResolveAdmin
from .trees import TreeFields

TIMELINE_LIMIT = 500  # steps shown on a run's page; the API pages through longer streams


def _step_count() -> Coalesce:
    # A correlated subquery rather than a JOIN + GROUP BY: it is evaluated for the page's
    # rows only, and the changelist stays one query however many steps runs have.
    steps = (
        AgentRunEvent.objects.filter(run=OuterRef("pk")).order_by().values("run").annotate(n=Count("pk")).values("n")
    )
    return Coalesce(Subquery(steps, output_field=IntegerField()), 0)


@admin.register(AgentRun)
class AgentRunAdmin(TreeFields, RunResolveAdmin):
    """Lists and shows runs; cancels them, and decides on a call in doubt, through ``AgentRuntime`` only."""

    # Fits 1280 px: a short id, a coloured status (its reason on hover), the prompt, who, what it
    # spent, how long it took, and one date (relative; the exact local time on hover).
    list_display = (
        "short_id",
        "status_column",
        "prompt_excerpt",
        "owner",
        "tokens_column",
        "cost_column",
        "duration_column",
        "created_column",
    )
    list_display_links = ("short_id",)
    list_filter = (
        "status",
        HealthFilter,
        "termination_reason",
        listing.ProviderFilter,  # its choices from the settings and connections, not the runs
        "cancel_source",
        "created_at",
        ("parent", admin.EmptyFieldListFilter),
        ("thread", admin.EmptyFieldListFilter),
    )
    list_select_related = ("owner",)
    # No date_hierarchy: its MIN/MAX and DISTINCT DATE_TRUNC read every run of the level shown;
    # the "created at" filter's ranges (and ?created_at__gte=/__lt=) use the created_at index.
    search_fields = ("prompt",)  # ``get_search_results`` adds the ids
    search_help_text = "The start of a run id, or words of the prompt as written."
    show_full_result_count = False  # no COUNT(*) over the whole table on every filtered page
    show_facets = admin.ShowFacets.NEVER  # facets count every filter's choices over the whole list
    paginator = listing.RunPaginator  # counts at most COUNT_CAP rows
    actions = ["cancel_selected", fork_selected]
    fieldsets = (
        (
            "Run",
            {
                "classes": ("collapse",),
                "fields": (
                    "id",
                    "status",
                    "termination_reason",
                    "owner",
                    "provider",
                    "connection",
                    "model",
                    "tools",
                    "prompt",
                    "claimed_by",
                ),
            },
        ),
        ("Times", {"classes": ("collapse",), "fields": ("created_at", "started_at", "finished_at", "lease_expires")}),
        (
            "Usage",
            {
                "classes": ("collapse",),
                "fields": ("iterations", "prompt_tokens", "completion_tokens", "total_tokens", "cost_display"),
            },
        ),
        ("Result", {"classes": ("collapse",), "fields": ("final_text", "error", "pending_approval")}),
        (
            "Cancel record",
            {
                "classes": ("collapse",),
                "fields": (
                    "cancel_requested_at",
                    "cancelled_by",
                    "cancel_source",
                    "cancel_reason",
                    "stopped_at",
                    "cancel_state",
                    "cancel_detail",
                ),
            },
        ),
        (
            "Limits",
            {"classes": ("collapse",), "fields": ("deadline_seconds", "max_total_tokens", "max_cost", "deadline_at")},
        ),
        # its class: admin_live.js swaps it with the live section (children move on their own)
        ("Tree", {"classes": ("run-tree-live",), "fields": TreeFields.TREE_FIELDS}),
        ("Forks", {"classes": ("collapse",), "fields": ("parent_link", "forked_from_sequence", "children_links")}),
        ("Agent", {"classes": ("collapse",), "fields": ("agent_version", "agent_snapshot")}),
        (
            "Thread",
            {
                "classes": ("collapse",),
                "fields": ("thread_link", "thread_position", "multitask_strategy", "rolled_back"),
            },
        ),
        ("Options", {"fields": ("options",), "classes": ("collapse",)}),
    )
    readonly_fields = tuple(flatten_fieldsets(fieldsets))

    # --- permissions: read-only; seeing and cancelling as the policy says ---------------------
    def has_module_permission(self, request: HttpRequest) -> bool:
        return policy.may_use_admin(request.user)

    def has_view_permission(self, request: HttpRequest, obj: AgentRun | None = None) -> bool:
        if obj is None:
            return policy.may_use_admin(request.user)
        return policy.may_use_admin(request.user) and policy.may(request.user, policy.Action.SEE, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: AgentRun | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: AgentRun | None = None) -> bool:
        return False

    def has_fork_permission(self, request: HttpRequest, obj: AgentRun | None = None) -> bool:
        """Whoever may view runs may fork them (like starting a run, plus seeing the parent)."""
        return self.has_view_permission(request, obj)

    # --- list --------------------------------------------------------------------------------
    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        """The list, with the totals (runs, tokens, money) of the listed runs per day and per user."""
        context = {**(extra_context or {}), "may_manage_queues": policy.may_manage_queues(request.user)}
        response = super().changelist_view(request, extra_context=context)
        context_data = response.context_data if isinstance(response, SimpleTemplateResponse) else None
        changelist = context_data.get("cl") if context_data is not None else None
        if context_data is not None and changelist is not None:
            context_data["totals"] = columns.totals(changelist.queryset)
        return response

    def get_queryset(self, request: HttpRequest) -> QuerySet[AgentRun]:
        return super().get_queryset(request).annotate(step_count=_step_count())

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[AgentRun], search_term: str
    ) -> tuple[QuerySet[AgentRun], bool]:
        """A whole run id is looked up by primary key; anything else matches the start of ids and
        a phrase of prompts (``listing.search``: each through an index)."""
        try:
            run_id = parse_run_id(search_term)
        except InvalidRunId:
            if not search_term.strip():
                return queryset, False
            return listing.search(queryset, search_term), False
        return queryset.filter(pk=run_id), False

    def action_checkbox(self, obj: AgentRun) -> SafeString:
        """Django's row checkbox, written at once: its widget renders a template for each row,
        which was a third of the list's time (issue 45); the markup is the widget's."""
        label = format_html(_("Select this object for an action - {}"), str(obj))
        return format_html(
            '<input type="checkbox" name="{}" value="{}" class="action-select" aria-label="{}">',
            helpers.ACTION_CHECKBOX_NAME,
            str(obj.pk),
            label,
        )

    @admin.display(description="prompt")
    def prompt_excerpt(self, run: AgentRun) -> str:
        return truncatechars(run.prompt, 90)

    @admin.display(description="id", ordering="id")
    def short_id(self, run: AgentRun) -> str:
        return format_html('<code title="{}">{}</code>', run.pk, str(run.pk)[:8])

    @admin.display(description="status", ordering="status")
    def status_column(self, run: AgentRun) -> str:
        return columns.status_badge(run)

    @admin.display(description="tokens", ordering=F("prompt_tokens") + F("completion_tokens"))
    def tokens_column(self, run: AgentRun) -> int:
        return run.total_tokens

    @admin.display(description="cost")
    def cost_column(self, run: AgentRun) -> str:
        return columns.cost_text(run)

    @admin.display(description="duration")
    def duration_column(self, run: AgentRun) -> str:
        return columns.span(run.started_at, run.finished_at)

    @admin.display(description="created", ordering="created_at")
    def created_column(self, run: AgentRun) -> str:
        return columns.when(run.created_at)

    # --- a run's page ------------------------------------------------------------------------
    @admin.display(description="total tokens")
    def total_tokens(self, run: AgentRun) -> int:
        return run.total_tokens

    @admin.display(description="error")
    @admin.display(description="cost")
    def cost_display(self, run: AgentRun) -> str:
        return pricing.cost_text(run)

    def error(self, run: AgentRun) -> str:
        return f"{run.error_class}: {run.error_message}" if run.error_class else "-"

    @admin.display(description="pending approval")
    def pending_approval(self, run: AgentRun) -> str:
        calls = (run.suspended_state or {}).get("pending_calls") or []
        text = "; ".join(timeline.call_text(c) for c in calls) or "-"
        return f"{text} (a call in doubt: see the summary)" if doubt.call_in_doubt(run) else text

    @admin.display(description="forked from")
    def parent_link(self, run: AgentRun) -> str:
        if not run.parent_id:
            return "-"
        return format_html('<a href="{}">{}</a>', self._url("change", run.parent_id), run.parent_id)

    @admin.display(description="thread")
    def thread_link(self, run: AgentRun) -> str:
        if not run.thread_id:
            return "-"
        url = reverse("admin:nrllm_agents_thread_change", args=[run.thread_id], current_app=self.admin_site.name)
        return format_html('<a href="{}">{}</a>', url, run.thread_id)

    @admin.display(description="forks of this run")
    def children_links(self, run: AgentRun) -> str:
        children = run.children.order_by("created_at").values_list("pk", "forked_from_sequence", "status")
        return (
            format_html_join(
                ", ",
                '<a href="{}">{}</a> (from step #{}, {})',
                ((self._url("change", pk), pk, seq, status) for pk, seq, status in children),
            )
            or "-"
        )

    @admin.display(description="stop acknowledged")
    def cancel_state(self, run: AgentRun) -> str:
        if not run.cancel_requested_at:
            return "-"
        if run.stopped_at:
            return "yes"
        return f"not yet: {EXECUTING_STOPS}"

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: AgentRun | None = None,
    ) -> HttpResponse:
        if obj is not None:
            events = self.runtime.events(obj.pk, limit=TIMELINE_LIMIT)
            status = run_status_dict(obj)
            picture = gantt.build(obj, events)
            live = not stream_finished(obj)
            context.update(
                {
                    "summary": {
                        "status": columns.status_badge(obj),
                        "reason": obj.get_termination_reason_display() if obj.termination_reason else "-",
                        "created": columns.when(obj.created_at),
                        "started": columns.when(obj.started_at),
                        "finished": columns.when(obj.finished_at),
                        "duration": columns.span(obj.started_at, obj.finished_at),
                        "cost": columns.cost_text(obj) if obj.is_terminal else spend_text(obj, picture),
                        "tokens": columns.tokens_of(obj, picture.spend),
                        "cancel": describe.cancel_text(status["cancel"]) if status["cancel"] else "",
                        "error": status["error"],
                    },
                    "stream_url": reverse("nrllm_api:run-stream", args=[obj.pk]),
                    "live": live,
                    "timeline": timeline.rows(events),
                    "picture": picture,
                    "running": picture.in_flight if live and obj.status == RunStatus.RUNNING else None,
                    "timeline_total": getattr(obj, "step_count", len(events)),
                    "can_cancel": not obj.is_terminal and self.has_cancel_permission(request, obj),
                    "can_fork": obj.is_terminal and obj.purged_at is None and self.has_fork_permission(request, obj),
                    "cancel_url": self._url("cancel", obj.pk),
                    # a call that may or may not have happened, and whether this user may say which
                    "doubt": doubt.call_in_doubt(obj),
                    "can_resolve": self.has_approve_permission(request, obj),
                    "resolve_url": self._url("resolve", obj.pk),
                }
            )
        return super().render_change_form(request, context, add=add, change=change, form_url=form_url, obj=obj)

    def operations_view(self, request: HttpRequest) -> HttpResponse:
        """Counts by status, stuck runs, the last reaper pass and the queue depth, each linked."""
        return operations_page(self, request)

    # --- URLs (the cancel views are ``RunCancelAdmin``'s, the resolve view ``RunResolveAdmin``'s) ---
    def get_urls(self) -> list[URLPattern]:
        """The standard admin URLs plus ``operations/``, ``<id>/cancel/`` (a run's cancel confirmation)
        and ``<id>/resolve/`` (the decision on a call in doubt).

        Listed first: the standard ``<path:object_id>/`` fallback would otherwise take it.
        """

        def wrap(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
            def wrapper(*args: Any, **kwargs: Any) -> HttpResponse:
                return self.admin_site.admin_view(view)(*args, **kwargs)  # staff login, CSRF, never_cache

            wrapper.model_admin = self  # type: ignore[attr-defined]
            return update_wrapper(wrapper, view)

        info = self.opts.app_label, self.opts.model_name
        return [
            path("operations/", wrap(self.operations_view), name="{}_{}_operations".format(*info)),
            path("<path:object_id>/cancel/", wrap(self.cancel_view), name="{}_{}_cancel".format(*info)),
            path("<path:object_id>/resolve/", wrap(self.resolve_view), name="{}_{}_resolve".format(*info)),
            *super().get_urls(),
        ]
