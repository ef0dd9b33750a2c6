"""The playground's conversations: a chat view of a thread, live, with Stop.

A thread's page shows the transcript its next run starts from as chat bubbles, its runs in
message order, and a message form with a multitask strategy. With JavaScript the run in
flight is followed on the run's own live stream (``api/runs/<id>/stream/``): its answer grows
as the model writes it, Stop cancels it (the playground's cancel), and the page reloads once
it ends. Posting and cancelling call the runtime; who may see and post is the policy's.
"""

from __future__ import annotations

import uuid
from typing import Any

from django import forms
from django.contrib import messages
from django.db.models import Count, OuterRef, Subquery, Sum
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from .. import admission
from ..access import policy
from ..admission.budgets import BudgetRefused
from ..domain import jsonlimits
from ..executors.dispatch import EnqueueError
from ..http import answers
from ..http.answers import Answer
from ..models import ACTIVE, AgentRun, MultitaskStrategy, RunStatus, Thread
from ..money import amounts
from ..presentation.describe import who_cancelled
from ..runtime import threads
from ..runtime.agent_runtime import AgentRuntime
from ..validation.run_request import MAX_PROMPT_CHARS, InvalidRequest, RunRequest
from .access import login_required, raise_refusal, wants_json
from .display import absolute
from .views import _throttled

RECENT_THREADS = 30


class MessageForm(forms.Form):
    """A message: the prompt, the strategy while a run is active, an optional script."""

    prompt = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), max_length=MAX_PROMPT_CHARS)
    multitask_strategy = forms.ChoiceField(choices=MultitaskStrategy.choices, label="While a run is active")
    script = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false"}),
        help_text='Optional, scripted provider only: a JSON list of turns, e.g. [{"delay": 2, "content": "hi"}]',
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["multitask_strategy"].initial = threads.default_strategy()
        self.run_request: RunRequest | None = None

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        if self.errors:
            return data
        mapping: dict[str, Any] = {"prompt": data["prompt"]}
        script = (data.get("script") or "").strip()
        try:
            if script:
                mapping["script"] = jsonlimits.loads(script)
            self.run_request = RunRequest.from_mapping(mapping)
            refusal = policy.provider_refusal(self.run_request.provider)  # no test double in production
            if refusal is not None:
                self.run_request = None
                self.add_error(None, refusal)
        except jsonlimits.JSONRefused as exc:
            self.add_error("script", str(exc))
        except InvalidRequest as exc:
            for name, message in exc.errors.items():
                self.add_error(name if name in self.fields else None, message)
        return data


def _visible_thread(request: HttpRequest, thread_id: uuid.UUID, action: policy.Action) -> Thread | Answer:
    """The thread if the policy lets the caller ``action`` it, else its refusal (``http.answers``)."""
    thread = policy.visible_threads(request.user).filter(pk=thread_id).first()
    refused = answers.refusal(policy.verdict(request.user, action, thread), action)
    if refused is not None:
        return refused
    assert thread is not None
    return thread


@require_GET
@login_required
def thread_list(request: HttpRequest) -> HttpResponse:
    """The user's threads, most recently active first, and a button for a new one."""
    runs = AgentRun.objects.filter(thread=OuterRef("pk"))
    recent = (
        Thread.objects.filter(owner_id=request.user.pk)
        .annotate(
            run_count=Count("runs"),
            spent=Sum("runs__cost"),
            first_message=Subquery(runs.order_by("thread_position").values("prompt")[:1]),
            last_status=Subquery(runs.order_by("-thread_position").values("status")[:1]),
        )
        .order_by("-last_activity_at")[:RECENT_THREADS]
    )
    return render(
        request,
        "nrllm_agents/threads.html",
        {
            "threads": [
                {
                    "thread": t,
                    "spent": amounts.text(t.spent) or "",
                    "status": (t.last_status or "").replace("_", " "),
                    "when": absolute(t.last_activity_at),
                }
                for t in recent
            ]
        },
    )


@require_POST
@login_required
def new_thread(request: HttpRequest) -> HttpResponse:
    title = (request.POST.get("title") or "").strip()[:200]
    thread = threads.create(owner=request.user, title=title)
    return redirect("nrllm_web:thread", thread_id=thread.pk)


def turns(runs: list[AgentRun]) -> list[dict[str, Any]]:
    """The conversation as its settled runs wrote it, one turn per run: the message, the answer
    (for a run a cancel cut short, what it had written, marked so), its tokens and cost; a
    rolled-back turn stays, struck (it is not in the transcript the next run starts from)."""
    shown = []
    for run in runs:
        if run.status in ACTIVE:
            continue
        answer = run.final_text
        if not answer and run.status == RunStatus.CANCELLED:
            last = run.events.filter(kind="llm").order_by("-sequence").values_list("payload", flat=True).first()
            answer = str((last or {}).get("content") or "") if isinstance(last, dict) else ""
        shown.append(
            {
                "run": run,
                "answer": answer,
                "interrupted": run.status == RunStatus.CANCELLED,
                "cancel_who": who_cancelled({"by": run.cancelled_by_name, "source": run.cancel_source})
                if run.status == RunStatus.CANCELLED
                else "",
                "failed": run.status == RunStatus.FAILED,
                "tokens": run.total_tokens,
                "cost": amounts.text(run.cost, estimated=run.cost_estimated) or "",
            }
        )
    return shown


def _page(request: HttpRequest, thread: Thread, form: MessageForm | None = None, status: int = 200) -> HttpResponse:
    runs = list(thread.runs.order_by("thread_position"))
    current = next((r for r in runs if r.status in ACTIVE), None)
    context = {
        "thread": thread,
        "turns": turns(runs),
        "runs": runs,
        "current": current,
        "form": form or MessageForm(),
        "may_post": policy.may(request.user, policy.Action.POST_MESSAGE, thread),
        "may_stop": current is not None and policy.may(request.user, policy.Action.CANCEL, current),
    }
    if current is not None:
        context["stream_url"] = reverse("nrllm_api:run-stream", args=[current.pk])
        context["cancel_url"] = reverse("nrllm_web:cancel", args=[current.pk])
    return render(request, "nrllm_agents/thread.html", context, status=status)


@require_GET
@login_required
def thread_page(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    thread = _visible_thread(request, thread_id, policy.Action.SEE)
    if isinstance(thread, Answer):
        raise_refusal(thread, "no such thread")
    return _page(request, thread)


@require_POST
@login_required
def post_message(request: HttpRequest, thread_id: uuid.UUID) -> HttpResponse:
    """Post a message (throttled like starting a run); JSON for scripts, else back to the chat."""
    refused = _throttled(request, admission.Action.CREATE)
    if refused is not None:
        return refused
    thread = _visible_thread(request, thread_id, policy.Action.POST_MESSAGE)
    if isinstance(thread, Answer):
        if wants_json(request) and thread.status == 404:
            return answers.json_response(thread)
        raise_refusal(thread, "no such thread")
    form = MessageForm(request.POST)
    if not form.is_valid() or form.run_request is None:
        if wants_json(request):
            return JsonResponse({"errors": {k: [str(m) for m in v] for k, v in form.errors.items()}}, status=400)
        return _page(request, thread, form=form, status=400)
    url = reverse("nrllm_web:thread", args=[thread.pk])
    try:
        run_id = AgentRuntime().post(
            thread.pk, form.run_request, owner=request.user, strategy=form.cleaned_data["multitask_strategy"]
        )
    except (threads.ThreadBusy, threads.ThreadNotFound, EnqueueError, BudgetRefused, policy.UseRefused) as exc:
        answer = answers.for_error(exc)
        assert answer is not None
        if answer.status == 404:  # purged in between
            raise Http404(answer.message) from None
        level = messages.WARNING if answer.status == 409 else messages.ERROR
        return _said(request, url, answer.status, level, answer.message)
    return _said(request, url, 202, messages.SUCCESS, "Sent.", run_id=str(run_id))


def _said(request: HttpRequest, url: str, status: int, level: int, message: str, **extra: Any) -> HttpResponse:
    if wants_json(request):
        return JsonResponse({"message": message, "url": url, **extra}, status=status)
    messages.add_message(request, level, message)
    return redirect(url)
