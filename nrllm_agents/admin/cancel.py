"""The admin's cancel: the runs list's "Cancel selected runs" action and a run's own
``<id>/cancel/`` page, a confirmation page, then a summary of what the runtime did.

Follows ``django.contrib.admin.actions.delete_selected``: both render a confirmation page
listing what will happen to each selected run; posting it back (``post=yes``) calls
``AgentRuntime`` once and reports the outcome with ``message_user``. Nothing here writes a
status, and who may cancel which run is ``nrllm_agents.access.policy``'s decision: staff cancel
their own runs, and other users' runs with the ``nrllm_agents.cancel_agentrun`` permission.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.templatetags.admin_urls import add_preserved_filters
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.db.models.options import Options
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from ..access import policy
from ..models import AgentRun, CancelSource, RunStatus
from ..presentation.outcomes import EXECUTING_STOPS, bulk_wording, cancel_wording
from ..runtime.agent_runtime import AgentRuntime, CancelResult, InvalidRunId, parse_run_id
from ..store import MAX_REASON_CHARS, BulkCancel
from . import timeline
from .bases import RunModelAdmin

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin

CONFIRM_MAX_ROWS = 100  # rows listed on the confirmation page; the counts cover the whole selection


class CancelForm(forms.Form):
    """The operator's optional reason, recorded on each cancelled run and its ``cancelled`` step."""

    reason = forms.CharField(
        required=False,
        max_length=MAX_REASON_CHARS,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
        help_text="Optional. Recorded on every run this cancels.",
    )


def plan(status: str) -> str:
    """What a cancel will do to a run in ``status``."""
    if status == RunStatus.RUNNING:
        return f"cancel: it is executing; {EXECUTING_STOPS}"
    if status in (RunStatus.QUEUED, RunStatus.WAITING_FOR_APPROVAL):
        return "cancel: it is not executing and stops at once"
    if status == RunStatus.CANCELLED:
        return "nothing: already cancelled"
    return f"nothing: already finished ({status})"


def bulk_summary(result: BulkCancel) -> tuple[str, int]:
    """The message and level for what ``cancel_many`` did (``outcomes.bulk_wording``)."""
    wording = bulk_wording(result)
    return wording.text, messages.SUCCESS if wording.changed else messages.WARNING


def preview(result: BulkCancel) -> str:
    """The confirmation page's summary of a dry run, e.g. ``"2 runs will be cancelled, ..."``."""
    return bulk_wording(result).text


def single_summary(result: CancelResult) -> tuple[str, int]:
    """The message and level for what ``AgentRuntime.cancel`` did to one run (``outcomes.cancel_wording``)."""
    wording = cancel_wording(result)
    return wording.sentence(result.run_id), messages.SUCCESS if wording.changed else messages.WARNING


def confirmation(
    modeladmin: ModelAdmin[Any],
    request: HttpRequest,
    queryset: QuerySet[AgentRun],
    *,
    form: CancelForm,
    counts: BulkCancel,
    hidden: Iterable[tuple[str, Any]],
    title: str,
    original: Any = None,
) -> TemplateResponse:
    """The confirmation page: the selected runs, what will happen to each, the reason field.

    ``hidden`` are the fields that route the post back to the same action (they include
    ``post=yes``); the form posts to the current URL, so changelist filters are kept.
    ``original`` is the run whose page this came from, if any (for the breadcrumbs).
    """
    opts = modeladmin.model._meta
    shown = list(queryset.select_related("owner").order_by("-created_at")[:CONFIRM_MAX_ROWS])
    total = sum(counts.cancelled.values()) + sum(counts.unchanged.values())
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": title,
        "subtitle": None,
        "opts": opts,
        "original": original,
        "form": form,
        "summary": preview(counts),
        "rows": [(run, plan(run.status)) for run in shown],
        "more": max(total - len(shown), 0),
        "actionable": counts.cancelled_total > 0,
        "hidden": [(name, str(value)) for name, value in hidden],
        "media": modeladmin.media + form.media,
    }
    request.current_app = modeladmin.admin_site.name
    return TemplateResponse(request, f"admin/{opts.app_label}/{opts.model_name}/cancel_confirmation.html", context)


class RunCancelAdmin(RunModelAdmin):
    """The cancel half of ``AgentRunAdmin`` (which adds ``<id>/cancel/`` to its URLs)."""

    runtime = AgentRuntime()

    def has_cancel_permission(self, request: HttpRequest, obj: AgentRun | None = None) -> bool:
        """Whether the policy lets the user cancel ``obj`` (without one: any run, e.g. their own)."""
        if obj is None:
            return policy.may_use_admin(request.user)
        return policy.may_use_admin(request.user) and policy.may(request.user, policy.Action.CANCEL, obj)

    def _url(self, view: str, *args: Any) -> str:
        return reverse(
            f"admin:{self.opts.app_label}_{self.opts.model_name}_{view}", args=args, current_app=self.admin_site.name
        )

    def response_action(
        self, request: HttpRequest, queryset: QuerySet[AgentRun], *args: Any, **kwargs: Any
    ) -> HttpResponse | None:
        """Refuse selections that are not run ids with a message, instead of a server error.

        Extra arguments (Django 6.x passes ``action_location``) go through to Django unchanged.
        """
        selected = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
        bad = [value for value in selected if not _is_uuid(value)]
        if bad:
            self.message_user(
                request, f"Not a run id: {timeline.clip(bad[0], 80)!r}. Nothing was changed.", messages.ERROR
            )
            return HttpResponseRedirect(request.get_full_path())
        return super().response_action(request, queryset, *args, **kwargs)

    @admin.action(description="Cancel selected runs", permissions=["cancel"])
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet[AgentRun]) -> HttpResponse | None:
        """Confirm, then cancel the selection with one set-based call and summarise per outcome.

        Only the selected runs the policy lets the user cancel are touched; the others are
        counted and named as left alone.
        """
        allowed = policy.actionable_runs(request.user, policy.Action.BULK_CANCEL, queryset)
        refused = 0 if allowed is queryset else queryset.count() - allowed.count()
        queryset = allowed
        form = CancelForm(request.POST if request.POST.get("post") else None)
        if refused and not form.is_bound:
            self.message_user(
                request,
                f"{refused} of the selected runs are not yours and you lack the cancel "
                "permission: they will be left alone.",
                messages.WARNING,
            )
        if form.is_bound and form.is_valid():
            result = self.runtime.cancel_many(
                queryset, by=request.user, source=CancelSource.ADMIN, reason=form.cleaned_data["reason"]
            )
            self.message_user(request, *bulk_summary(result))
            if refused:
                self.message_user(
                    request,
                    f"{refused} selected runs were left alone: they are not yours and you lack the cancel permission.",
                    messages.WARNING,
                )
            return None
        select_across = request.POST.get("select_across") == "1"
        hidden = [
            ("action", "cancel_selected"),
            ("select_across", int(select_across)),
            *((helpers.ACTION_CHECKBOX_NAME, pk) for pk in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)),
            ("post", "yes"),
        ]
        counts = self.runtime.cancel_many(queryset, source=CancelSource.ADMIN, dry_run=True)
        return confirmation(
            self, request, queryset, form=form, counts=counts, hidden=hidden, title="Cancel selected runs"
        )

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """A run's "Cancel run…": the same confirmation for one run; then ``AgentRuntime.cancel``.

        GET, or a POST without ``post=yes``, shows the confirmation; its form posts back here
        with ``post=yes`` and the reason. Without the cancel permission the answer is 403 and
        nothing is read or changed; an id that is not a run's redirects to the list with a message.
        """
        if request.method not in ("GET", "HEAD", "POST"):
            return HttpResponseNotAllowed(["GET", "HEAD", "POST"])
        if not (self.has_view_permission(request) and self.has_cancel_permission(request)):
            raise PermissionDenied
        run = self._named_run(request, object_id)
        if not isinstance(run, AgentRun):
            return run
        queryset = self.get_queryset(request).filter(pk=run.pk)
        if not self.has_cancel_permission(request, run):
            raise PermissionDenied
        form = CancelForm(request.POST if request.method == "POST" and request.POST.get("post") else None)
        if form.is_bound and form.is_valid():
            result = self.runtime.cancel(
                run.pk, by=request.user, source=CancelSource.ADMIN, reason=form.cleaned_data["reason"]
            )
            self.message_user(request, *single_summary(result))
            preserved: dict[str, Options[Any] | str] = {
                "preserved_filters": self.get_preserved_filters(request),
                "opts": self.opts,
            }
            return HttpResponseRedirect(add_preserved_filters(preserved, self._url("change", run.pk)))
        counts = self.runtime.cancel_many(queryset, source=CancelSource.ADMIN, dry_run=True)
        return confirmation(
            self,
            request,
            queryset,
            form=form,
            counts=counts,
            hidden=[("post", "yes")],
            title="Cancel this run",
            original=run,
        )

    def _named_run(self, request: HttpRequest, object_id: str) -> AgentRun | HttpResponse:
        """The run a run's own admin URL names, or the redirect to the list with a message that
        says why there is none (not a run id, no such run); nothing is changed."""
        try:
            run_id = parse_run_id(unquote(object_id))
        except InvalidRunId:
            return self._refuse(
                request, f"Not a run id: {timeline.clip(unquote(object_id), 80)!r}. Nothing was changed."
            )
        run = self.get_queryset(request).filter(pk=run_id).first()
        if run is None:
            return self._refuse(request, f"Run {run_id} does not exist; nothing changed.")
        return run

    def _refuse(self, request: HttpRequest, message: str) -> HttpResponse:
        self.message_user(request, message, messages.ERROR)
        return HttpResponseRedirect(self._url("changelist"))


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except (ValueError, TypeError):
        return False
    return True
