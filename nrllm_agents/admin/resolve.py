"""The admin's decision on a call in doubt: a run's page shows the call that may or may not have
happened, and its form posts to the run's own ``<id>/resolve/``.

Two of the three decisions post here: *it happened* (with the result to record, as JSON) and *it
did not happen* (the call is made again); the third is the run's cancel (``cancel.py``). The
decision is handed to a worker (``AgentRuntime.resolve(queued=True)``), like every resume the
admin could start, and ``message_user`` says what happened. Who may decide is the policy's
approve rule (``nrllm_agents.access.policy``, ``Action.APPROVE``): staff decide on their own runs,
and on other users' runs with ``nrllm_agents.approve_agentrun``. Nothing here writes a status.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.admin.templatetags.admin_urls import add_preserved_filters
from django.core.exceptions import PermissionDenied
from django.db.models.options import Options
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect

from ..access import policy
from ..executors.dispatch import EnqueueError
from ..http import answers
from ..models import AgentRun
from ..presentation.outcomes import ApprovalNotPending, DecisionMismatch, Outcome, RunNotFound, queued_wording
from ..validation.run_request import InvalidRequest
from ..web import doubt
from .cancel import RunCancelAdmin


class RunResolveAdmin(RunCancelAdmin):
    """The decision half of ``AgentRunAdmin`` (which adds ``<id>/resolve/`` to its URLs)."""

    def has_approve_permission(self, request: HttpRequest, obj: AgentRun | None = None) -> bool:
        """Whether the policy lets the user decide on ``obj``'s wait (without one: any run)."""
        if obj is None:
            return policy.may_use_admin(request.user)
        return policy.may_use_admin(request.user) and policy.may(request.user, policy.Action.APPROVE, obj)

    def resolve_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST a ``doubt.ResolveForm``: ``AgentRuntime.resolve``, then back to the run's page with
        a message. Without the approve permission the answer is 403 and nothing changes; a bad
        result, a run that no longer waits, or one that waits for an approval instead, is a
        message, nothing changed."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not (self.has_view_permission(request) and self.has_approve_permission(request)):
            raise PermissionDenied
        run = self._named_run(request, object_id)
        if not isinstance(run, AgentRun):
            return run
        if not self.has_approve_permission(request, run):
            raise PermissionDenied
        form = doubt.ResolveForm(request.POST)
        if form.is_valid():
            self._decide(request, run, form)
        else:
            self.message_user(request, f"Not decided: {form.problem()}. Nothing was changed.", messages.ERROR)
        preserved: dict[str, Options[Any] | str] = {
            "preserved_filters": self.get_preserved_filters(request),
            "opts": self.opts,
        }
        return HttpResponseRedirect(add_preserved_filters(preserved, self._url("change", run.pk)))

    def _decide(self, request: HttpRequest, run: AgentRun, form: doubt.ResolveForm) -> None:
        call = doubt.call_in_doubt(run)
        said = doubt.decided_text(form.happened, call["name"] if call else "the call")
        data = form.cleaned_data
        try:
            handed = self.runtime.resolve(
                run.pk,
                form.happened,
                result=data.get("value"),
                by=request.user,
                reason=data["reason"],
                queued=True,
            )
        except (ApprovalNotPending, DecisionMismatch, RunNotFound, EnqueueError, InvalidRequest) as exc:
            answer = answers.for_error(exc)
            level = messages.WARNING if answer is not None and answer.status == 409 else messages.ERROR
            self.message_user(request, answer.message if answer is not None else str(exc), level)
            return
        if handed.outcome == Outcome.WAITING_FOR_QUEUE:
            self.message_user(request, f"{said}. {queued_wording(handed.outcome).sentence(run.pk)}", messages.WARNING)
        else:
            self.message_user(request, f"{said}; a worker resumes the run.", messages.SUCCESS)
