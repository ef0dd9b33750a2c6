"""The admin's cancel flow: a confirmation page, then a summary of what the runtime did.

Follows ``django.contrib.admin.actions.delete_selected``: the list's action, and a run's own
cancel URL, render a confirmation page listing what will happen to each selected run;
posting it back (``post=yes``) calls the runtime once and reports the outcome with
``message_user``. Nothing here writes a status: the words below only map the runtime's
result values.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from ..models import AgentRun, RunStatus
from ..presentation.outcomes import EXECUTING_STOPS, bulk_wording, cancel_wording
from ..runtime.agent_runtime import CancelResult
from ..store import MAX_REASON_CHARS, BulkCancel

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
