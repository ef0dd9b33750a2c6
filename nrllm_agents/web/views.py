"""The playground: start, watch, approve, resolve (a call in doubt) and cancel runs from a browser.

Start, Cancel, Approve and Resolve are plain POST forms (CSRF-protected) that work without
JavaScript and redirect to the run page; called by ``fetch`` with ``Accept:
application/json`` they answer JSON instead. Every action calls the runtime and maps its
result; none writes a status. Who may see and act on which run is ``nrllm_agents.access.policy``'s
decision, and how a refusal or a domain error is answered is ``http.answers``'s (404 for a run
the caller may not see, 403 or a message for one they may not act on, 409, 503).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from .. import admission
from ..access import policy
from ..admission.budgets import BudgetRefused
from ..catalog import budgets
from ..executors.dispatch import EnqueueError
from ..http import answers
from ..models import ACTIVE, TERMINAL, AgentRun, CancelSource, RunStatus
from ..observability import gantt
from ..presentation.describe import call_text, cancel_text, who_cancelled
from ..presentation.outcomes import (
    ApprovalAmbiguous,
    DecisionMismatch,
    InvalidRunId,
    Outcome,
    cancel_wording,
    queued_wording,
)
from ..presentation.presenters import event_dict, run_status_dict, stream_finished
from ..runtime.agent_runtime import (
    AgentRuntime,
    ApprovalNotPending,
    CancelOutcome,
    CancelResult,
    RunNotFound,
    RunResult,
)
from ..runtime.forks import NotForkable, ParentPurged, provider_of
from ..store import reason_problem
from ..validation.run_request import InvalidRequest
from . import doubt, interactive, tree
from .access import get_visible_run, login_required, visible_run, wants_json
from .display import absolute, duration, elapsed, final_answer_sequence, for_page, spend_text
from .forms import ForkForm, RunForm
from .runs_list import recent_runs


def _urls(run_id: uuid.UUID) -> dict[str, str]:
    return {
        "url": reverse("nrllm_web:run", args=[run_id]),
        "stream_url": reverse("nrllm_api:run-stream", args=[run_id]),
    }


def _run_json(run_id: uuid.UUID, status: int, **extra: Any) -> JsonResponse:
    run = AgentRuntime().status(run_id)
    return JsonResponse({"run_id": str(run_id), **_urls(run_id), **extra, "run": run_status_dict(run)}, status=status)


def _visible(request: HttpRequest, run_id: uuid.UUID, action: policy.Action) -> AgentRun | HttpResponse:
    """The run if the policy lets the caller ``action`` it; else its refusal (``http.answers``):
    JSON for scripts; Django's 404 page, or for a visible run the caller may not act on, a
    message on the run's page."""
    run = visible_run(request.user, run_id, action)
    if isinstance(run, AgentRun):
        return run
    if wants_json(request):
        return answers.json_response(run)
    if run.status == 404:
        raise Http404("no such run")
    messages.error(request, run.detail)
    return redirect("nrllm_web:run", run_id=run_id)


def _refused(request: HttpRequest, run_id: uuid.UUID, exc: BaseException, prefix: str = "") -> HttpResponse:
    """A domain error as ``http.answers`` maps it: Django's 404 page for a run gone in between,
    else its status and message (``prefix`` first): JSON for scripts, a message on the run's page."""
    answer = answers.for_error(exc)
    if answer is None:
        raise exc
    if answer.status == 404:
        raise Http404(answer.message) from None
    level = messages.WARNING if answer.status == 409 else messages.ERROR
    return _answer(request, run_id, answer.status, level, prefix + answer.message)


def _page(
    request: HttpRequest, *, form: RunForm | None = None, run: AgentRun | None = None, status: int = 200
) -> HttpResponse:
    context: dict[str, Any] = {"form": form or RunForm(user=request.user), "run": run, **recent_runs(request)}
    context["budgets"] = [budgets.as_dict(b) for b in budgets.covering_user(request.user)]
    if run is not None:
        events = AgentRuntime().events(run.pk)
        status_dict = run_status_dict(run)
        picture = gantt.build(run, events)
        stored = [event_dict(e) for e in events]
        final = final_answer_sequence(stored, run.final_text) if run.status == RunStatus.COMPLETED else None
        who = who_cancelled(status_dict["cancel"]) if status_dict["cancel"] else ""
        steps = [for_page(step, final_sequence=final, cancel_who=who) for step in stored]
        context.update(
            {
                "status": status_dict,
                # The run's row counts tokens when it settles; its steps count them as they land.
                "tokens": max(status_dict["usage"]["total_tokens"], picture.spend.total_tokens if picture.spend else 0),
                "remaining": gantt.remaining_calls(list(events)),
                "picture_url": reverse("nrllm_web:run-picture", args=[run.pk]),
                "kinds": sorted({step["kind"] for step in steps} | {"llm", "tool"}),
                "fork_form": ForkForm(
                    initial={"model": run.model, "max_iterations": run.options.get("max_iterations")}
                ),
                "pending": [call_text(c) for c in status_dict["pending_approval"]],
                "cancel_text": cancel_text(status_dict["cancel"]) if status_dict["cancel"] else "",
                "cost_text": spend_text(run, picture),
                "elapsed": elapsed(run.started_at, run.finished_at),
                "created_text": absolute(run.created_at),
                "deadline_text": duration(run.deadline_seconds * 1000) if run.deadline_seconds else "",
                "steps": steps,
                "picture": picture,
                "last_sequence": steps[-1]["sequence"] if steps else -1,
                "live": not stream_finished(run),
                "can_cancel": run.status in ACTIVE,
                "can_fork": run.status in TERMINAL and run.purged_at is None,
                "fork_url": reverse("nrllm_web:fork", args=[run.pk]),
                "children": policy.visible_runs(request.user).filter(parent=run).order_by("created_at"),  # forks
                "tree": tree.context(run, request.user),  # sub-agent runs, approvals waiting below
                "waiting": run.status == RunStatus.WAITING_FOR_APPROVAL,
                "doubt": doubt.call_in_doubt(run),  # the call a person says happened or not
                "may_cancel": policy.may(request.user, policy.Action.CANCEL, run),
                "may_approve": policy.may(request.user, policy.Action.APPROVE, run),
                **_urls(run.pk),
            }
        )
    return render(request, "nrllm_agents/playground.html", context, status=status)


def _throttled(request: HttpRequest, action: admission.Action) -> HttpResponse | None:
    """The rate limit of ``action``, the same counter the API spends (``admission.rates``):
    ``None`` when the request may go on, else a 429 (scripts) or a message (forms)."""
    refused = admission.take(request, action)
    if refused is None:
        return None
    if wants_json(request):
        return answers.json_response(answers.too_many(refused.detail, refused.wait))
    messages.error(request, refused.detail)
    return redirect("nrllm_web:playground")


@require_GET
def index(request: HttpRequest) -> HttpResponse:
    return redirect("nrllm_web:playground")


@require_GET
@login_required
def playground(request: HttpRequest) -> HttpResponse:
    """The form and the user's recent runs."""
    return _page(request)


@require_GET
@login_required
def run_page(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """One run: status strip, its stored stream (then live, with JavaScript), its actions."""
    return _page(request, run=get_visible_run(request.user, run_id))


@require_GET
@login_required
def run_picture(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """The run's picture alone (``_run_picture.html``): the page re-fetches it while the run
    runs, so the timeline and the spend follow the steps and the one in flight."""
    run = get_visible_run(request.user, run_id)
    picture = gantt.build(run, AgentRuntime().events(run.pk))
    response = render(
        request, "nrllm_agents/_run_picture.html", {"picture": picture, "cost_text": spend_text(run, picture)}
    )
    response["Cache-Control"] = "no-store"
    return response


@require_POST
@login_required
def start_run(request: HttpRequest) -> HttpResponse:
    """Start a run from the form: interactive (a thread of this process) or queued."""
    refused = _throttled(request, admission.Action.CREATE)
    if refused is not None:
        return refused
    form = RunForm(request.POST, user=request.user)
    if not form.is_valid() or form.run_request is None:
        if wants_json(request):
            return JsonResponse({"errors": {k: [str(m) for m in v] for k, v in form.errors.items()}}, status=400)
        return _page(request, form=form, status=400)
    runtime, run_request = AgentRuntime(), form.run_request
    if form.queued:
        try:
            queued = runtime.submit(run_request, owner=request.user)
        except EnqueueError as exc:  # the run was settled failed (enqueue_failed)
            return _refused(request, exc.run_id, exc)
        except (BudgetRefused, policy.UseRefused) as exc:  # nothing was started: the API's 429 or 403, in words
            answer = _capacity(exc)
            if wants_json(request):
                return answers.json_response(answer)
            messages.error(request, answer.message)
            return redirect("nrllm_web:playground")
        wording = queued_wording(queued.outcome)  # a queue outage is still a success: the run waits for it
        level = messages.SUCCESS if queued.outcome == Outcome.QUEUED else messages.WARNING
        return _answer(
            request,
            queued.run_id,
            wording.http_status,
            level,
            wording.sentence(queued.run_id),
            outcome=queued.outcome.value,
        )
    try:
        run_id = interactive.launch(
            lambda on_step: runtime.run(run_request, owner=request.user, on_step=on_step), user_key=request.user.pk
        )
    except (interactive.LaunchTimeout, interactive.AtCapacity, BudgetRefused, policy.UseRefused) as exc:
        answer = _capacity(exc)
        if wants_json(request):
            return answers.json_response(answer)
        messages.error(request, answer.message)
        return redirect("nrllm_web:playground")
    return _answer(request, run_id, 201, messages.SUCCESS, "Run started.")


def _capacity(
    exc: interactive.AtCapacity | interactive.LaunchTimeout | BudgetRefused | policy.UseRefused,
) -> answers.Answer:
    """What the one mapping answers to a run this process could not start now (or a budget, or
    the policy on agents and connections, refused)."""
    answer = answers.for_error(exc)
    assert answer is not None  # both name their status
    return answer


def _answer(
    request: HttpRequest, run_id: uuid.UUID, status: int, level: int, message: str, **extra: Any
) -> HttpResponse:
    """JSON for scripts; for forms, a message and a redirect to the run page."""
    if wants_json(request):
        return _run_json(run_id, status, message=message, **extra)
    messages.add_message(request, level, message)
    return redirect("nrllm_web:run", run_id=run_id)


def _cancel_answer(result: CancelResult) -> tuple[int, int, str]:
    """HTTP status, message level and message for what a cancel did (``outcomes.cancel_wording``)."""
    wording = cancel_wording(result)
    return (
        wording.http_status,
        messages.SUCCESS if wording.changed else messages.WARNING,
        wording.sentence(result.run_id),
    )


@require_POST
@login_required
def cancel_run(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """Cancel from the playground (source ``playground``, by the signed-in user)."""
    refused = _throttled(request, admission.Action.CANCEL)
    if refused is not None:
        return refused
    run = _visible(request, run_id, policy.Action.CANCEL)
    if not isinstance(run, AgentRun):
        return run
    reason = request.POST.get("reason") or ""
    problem = reason_problem(reason)
    if problem is not None:  # refused, never silently cut
        return _answer(request, run.pk, 400, messages.ERROR, f"Not cancelled: {problem}.")
    result = AgentRuntime().cancel(run.pk, by=request.user, source=CancelSource.PLAYGROUND, reason=reason)
    if result.outcome == CancelOutcome.NOT_FOUND:  # deleted between the lookup and the cancel
        return _refused(request, run.pk, RunNotFound(run.pk))
    status, level, message = _cancel_answer(result)
    return _answer(
        request, run.pk, status, level, message, outcome=result.outcome.value, previous_status=result.previous_status
    )


@require_POST
@login_required
def approve_run(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """Approve or deny the pending calls of a waiting run, then resume it.

    A run that came through the queue (it still holds its stored request) is resumed by a
    worker; an interactive one in a background thread of this process, so the page streams it.
    """
    decision = request.POST.get("decision")
    if decision not in ("approve", "deny"):
        if wants_json(request):
            return JsonResponse({"errors": {"decision": ["'approve' or 'deny'"]}}, status=400)
        messages.error(request, "Choose Approve or Deny.")
        return redirect("nrllm_web:run", run_id=run_id)
    run = _visible(request, run_id, policy.Action.APPROVE)
    if not isinstance(run, AgentRun):
        return run
    reason = request.POST.get("reason") or ""
    problem = reason_problem(reason)
    if problem is not None:  # refused, never silently cut
        return _answer(request, run.pk, 400, messages.ERROR, f"Not decided: {problem}.")
    approved, runtime, user = decision == "approve", AgentRuntime(), request.user
    # On a run waiting for its children: the approval waiting below it (``run_id`` names one of
    # several), decided here as on its own page; the policy is asked for that run too.
    try:
        target = runtime.approval_target(run.pk, pick=request.POST.get("run_id") or None)
    except (RunNotFound, ApprovalAmbiguous, InvalidRunId) as exc:
        return _refused(request, run.pk, exc)
    page = run.pk  # the answer goes back to the page the decision was made on
    if target != run.pk:
        run = _visible(request, target, policy.Action.APPROVE)
        if not isinstance(run, AgentRun):
            return run
    verb = "Approved" if approved else "Denied"
    return _resume(
        request,
        run,
        page,
        verb,
        lambda **how: runtime.approve(run.pk, approved, by=user, reason=reason, **how),
    )


@require_POST
@login_required
def resolve_run(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """Decide on a call in doubt (``doubt.ResolveForm``): it happened, with its result, or it did
    not (it is made again); then the run resumes as after an approval. Cancel is the third
    decision (``cancel_run``). Asks the approve permission; a bad result, a run that no longer
    waits, or one that waits for an approval instead, is a message (JSON for scripts)."""
    run = _visible(request, run_id, policy.Action.APPROVE)
    if not isinstance(run, AgentRun):
        return run
    form = doubt.ResolveForm(request.POST)
    if not form.is_valid():
        if wants_json(request):
            errors = {name: [str(m) for m in messages_] for name, messages_ in form.errors.items()}
            return JsonResponse({"errors": errors, "message": f"Not decided: {form.problem()}."}, status=400)
        messages.error(request, f"Not decided: {form.problem()}.")
        return redirect("nrllm_web:run", run_id=run.pk)
    # Said here, before a thread is started for it (the runtime refuses the same under a race).
    call = doubt.call_in_doubt(run)
    if run.status != RunStatus.WAITING_FOR_APPROVAL:
        return _refused(request, run.pk, ApprovalNotPending(run.pk, run.status))
    if call is None:
        return _refused(request, run.pk, DecisionMismatch(run.pk, in_doubt=False))
    runtime, user, data = AgentRuntime(), request.user, form.cleaned_data
    verb = doubt.decided_text(form.happened, call["name"])
    return _resume(
        request,
        run,
        run.pk,
        verb,
        lambda **how: runtime.resolve(
            run.pk, form.happened, result=data.get("value"), by=user, reason=data["reason"], **how
        ),
    )


def _resume(
    request: HttpRequest, run: AgentRun, page: uuid.UUID, verb: str, decide: Callable[..., RunResult]
) -> HttpResponse:
    """Resume a waiting run with a person's decision (``decide(queued=..., on_step=...)``): a run
    that came through the queue (it still holds its stored request) in a worker; an interactive
    one in a background thread of this process, so the page streams it. The answer goes back to
    ``page``, the run page the decision was made on."""
    try:
        if run.request_payload is not None:
            handed = decide(queued=True)
            if handed.outcome == Outcome.WAITING_FOR_QUEUE:
                wording = queued_wording(handed.outcome)
                return _answer(request, page, 202, messages.WARNING, f"{verb}. {wording.sentence(run.pk)}")
            return _answer(request, page, 202, messages.SUCCESS, f"{verb}; a worker resumes the run.")
        interactive.launch(lambda on_step: decide(on_step=on_step), user_key=request.user.pk)
    except (ApprovalNotPending, DecisionMismatch, RunNotFound, EnqueueError, InvalidRequest) as exc:
        return _refused(request, page, exc)
    except (interactive.LaunchTimeout, interactive.AtCapacity) as exc:
        answer = _capacity(exc)
        return _answer(request, page, answer.status, messages.ERROR, answer.message)
    return _answer(request, page, 202, messages.SUCCESS, f"{verb}; the run resumes.")


@require_POST
@login_required
def fork_run(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """ "Continue from here": a new run from step ``from_sequence`` of a stopped run, executed in
    a background thread of this process like an interactive run; the parent is not changed."""
    run = _visible(request, run_id, policy.Action.SEE)
    if not isinstance(run, AgentRun):
        return run
    if run.purged_at is not None:  # said here, before a thread is started for it
        return _refused(request, run.pk, ParentPurged(run.pk, run.purged_at))
    raw = request.POST.get("from_sequence", "").strip()
    # ASCII digits only ("²" and "①" are digits to str.isdigit, not to int) and few of them.
    if raw and not (raw.isascii() and raw.isdigit() and len(raw) <= 10):
        return _answer(request, run.pk, 400, messages.ERROR, "Choose a step to continue from.")
    changes = ForkForm(request.POST)
    if not changes.is_valid():
        problem = "; ".join(f"{name}: {' '.join(str(e) for e in errors)}" for name, errors in changes.errors.items())
        return _answer(request, run.pk, 400, messages.ERROR, f"Cannot continue with these changes: {problem}")
    overrides = changes.overrides()
    refusal = policy.provider_refusal(provider_of(run, overrides))
    if refusal is not None:
        return _answer(request, run.pk, 400, messages.ERROR, f"Cannot continue this run here: {refusal}.")
    refused = _throttled(request, admission.Action.CREATE)
    if refused is not None:
        return refused
    runtime, user = AgentRuntime(), request.user
    try:
        fork_id = interactive.launch(
            lambda on_step: runtime.fork(
                run.pk,
                from_sequence=int(raw) if raw else None,
                overrides=overrides or None,
                owner=user,
                queued=False,
                on_step=on_step,
            ),
            user_key=user.pk,
        )
    except InvalidRequest as exc:
        return _refused(request, run.pk, exc, prefix="Cannot continue from there: ")
    except (NotForkable, RunNotFound) as exc:
        return _refused(request, run.pk, exc)
    except (interactive.LaunchTimeout, interactive.AtCapacity, BudgetRefused, policy.UseRefused) as exc:
        answer = _capacity(exc)
        return _answer(request, run.pk, answer.status, messages.ERROR, answer.message)
    return _answer(request, fork_id, 201, messages.SUCCESS, f"Continuing run {run.pk} as a new run.")
