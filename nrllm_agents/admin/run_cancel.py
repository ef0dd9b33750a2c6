"""The runs admin's cancel: the list's "Cancel selected runs" action and a run's own
``<id>/cancel/`` confirmation page, both through ``AgentRuntime`` only.

Who may cancel which run is ``nrllm_agents.access.policy``'s decision: staff cancel their
own runs, and other users' runs with the ``nrllm_agents.cancel_agentrun`` permission. The
confirmation and the per-outcome summaries are ``cancel``'s.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.templatetags.admin_urls import add_preserved_filters
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.db.models.options import Options
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import reverse

from ..access import policy
from ..models import AgentRun, CancelSource
from ..runtime.agent_runtime import AgentRuntime, InvalidRunId, parse_run_id
from . import timeline
from .bases import RunModelAdmin
from .cancel import CancelForm, bulk_summary, confirmation, single_summary


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
        try:
            run_id = parse_run_id(unquote(object_id))
        except InvalidRunId:
            return self._refuse(
                request, f"Not a run id: {timeline.clip(unquote(object_id), 80)!r}. Nothing was changed."
            )
        queryset = self.get_queryset(request).filter(pk=run_id)
        run = queryset.first()
        if run is None:
            return self._refuse(request, f"Run {run_id} does not exist; nothing changed.")
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

    def _refuse(self, request: HttpRequest, message: str) -> HttpResponse:
        self.message_user(request, message, messages.ERROR)
        return HttpResponseRedirect(self._url("changelist"))


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except (ValueError, TypeError):
        return False
    return True
