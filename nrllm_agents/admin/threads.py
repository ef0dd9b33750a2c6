"""The threads admin: a read-only list and page per thread (its runs, its transcript), and a
form on the page that posts a message with a multitask strategy through ``AgentRuntime``.

Seeing a thread and posting to it are ``nrllm_agents.access.policy``'s decisions, as everywhere:
staff see every thread; only its owner posts to it. Threads are never added, edited or
deleted here (``manage.py agent_threads`` creates and purges them).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import update_wrapper
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join

from ..access import policy
from ..executors.dispatch import EnqueueError
from ..models import MultitaskStrategy, Thread
from ..runtime import threads
from ..runtime.agent_runtime import AgentRuntime
from ..validation.run_request import MAX_PROMPT_CHARS, InvalidRequest
from .bases import ThreadModelAdmin


class MessageForm(forms.Form):
    """A message to the thread: the prompt and what to do while a run of it is active."""

    prompt = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), max_length=MAX_PROMPT_CHARS, strip=False)
    multitask_strategy = forms.ChoiceField(choices=MultitaskStrategy.choices, required=False)


@admin.register(Thread)
class ThreadAdmin(ThreadModelAdmin):
    """Lists and shows threads; posts messages through ``AgentRuntime.post`` only."""

    list_display = ("id", "title", "owner", "run_count", "created_at", "last_activity_at")
    list_select_related = ("owner",)
    search_fields = ("id", "title")
    date_hierarchy = "last_activity_at"
    fields = ("id", "title", "owner", "created_at", "last_activity_at", "run_links", "transcript")
    readonly_fields = fields
    change_form_template = "admin/nrllm_agents/thread/change_form.html"
    runtime = AgentRuntime()

    def has_module_permission(self, request: HttpRequest) -> bool:
        return policy.may_use_admin(request.user)

    def has_view_permission(self, request: HttpRequest, obj: Thread | None = None) -> bool:
        if obj is None:
            return policy.may_use_admin(request.user)
        return policy.may_use_admin(request.user) and policy.may(request.user, policy.Action.SEE, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Thread | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Thread | None = None) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> Any:
        return policy.visible_threads(request.user).annotate(run_total=Count("runs"))

    @admin.display(description="runs", ordering="run_total")
    def run_count(self, thread: Thread) -> int:
        return int(getattr(thread, "run_total", 0))

    @admin.display(description="runs, in message order")
    def run_links(self, thread: Thread) -> str:
        runs = thread.runs.order_by("thread_position").values_list(
            "pk", "thread_position", "status", "rolled_back", "multitask_strategy", "prompt", "purged_at"
        )
        return (
            format_html_join(
                "<br>",
                '#{} <a href="{}">{}</a> {}{} ({}): {}',
                (
                    (
                        pos,
                        reverse("admin:nrllm_agents_agentrun_change", args=[pk]),
                        pk,
                        status,
                        " rolled back" if rolled else "",
                        strategy or "-",
                        f"(content purged on {purged:%Y-%m-%d})" if purged else prompt[:80],
                    )
                    for pk, pos, status, rolled, strategy, prompt, purged in runs
                ),
            )  # fmt: skip
            or "-"
        )

    @admin.display(description="transcript (what the next run starts from)")
    def transcript(self, thread: Thread) -> str:
        messages_, _ = threads.transcript(thread.pk)
        rows = (
            (m.get("role"), m.get("content") or ", ".join(str(c.get("name")) for c in m.get("tool_calls") or []))
            for m in messages_
        )
        return format_html_join("<br>", "<b>{}</b>: {}", rows) or "-"

    def render_change_form(self, request: HttpRequest, context: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        obj = kwargs.get("obj")
        if obj is not None and policy.may(request.user, policy.Action.POST_MESSAGE, obj):
            context["message_form"] = MessageForm()
            context["message_url"] = reverse("admin:nrllm_agents_thread_message", args=[obj.pk])
        return super().render_change_form(request, context, *args, **kwargs)

    def get_urls(self) -> list[URLPattern]:
        def wrap(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
            def wrapper(*args: Any, **kwargs: Any) -> HttpResponse:
                return self.admin_site.admin_view(view)(*args, **kwargs)

            return update_wrapper(wrapper, view)

        return [
            path("<path:object_id>/message/", wrap(self.message_view), name="nrllm_agents_thread_message"),
            *super().get_urls(),
        ]

    def message_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Post the form's message to the thread, then back to its page with what happened."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        try:
            pk = threads.parse_thread_id(unquote(object_id))
        except threads.ThreadNotFound:
            raise Http404("No such thread.") from None
        thread = policy.visible_threads(request.user).filter(pk=pk).first()
        verdict = policy.verdict(request.user, policy.Action.POST_MESSAGE, thread)
        if verdict == policy.Verdict.NOT_FOUND or thread is None:
            raise Http404("No such thread.")
        if verdict != policy.Verdict.ALLOWED:
            raise PermissionDenied(policy.REFUSALS[policy.Action.POST_MESSAGE])
        back = HttpResponseRedirect(reverse("admin:nrllm_agents_thread_change", args=[thread.pk]))
        form = MessageForm(request.POST)
        if not form.is_valid():
            self.message_user(request, f"Not posted: {form.errors.as_text()}", messages.ERROR)
            return back
        data = form.cleaned_data
        try:
            run_id = self.runtime.post(
                thread.pk, {"prompt": data["prompt"]}, owner=request.user, strategy=data["multitask_strategy"] or None
            )
        except InvalidRequest as exc:
            self.message_user(
                request, "Not posted: " + "; ".join(f"{k}: {v}" for k, v in exc.errors.items()), messages.ERROR
            )
            return back
        except threads.ThreadBusy as exc:
            self.message_user(request, f"Not posted: {exc}", messages.WARNING)
            return back
        except EnqueueError as exc:
            self.message_user(request, f"Posted, but the queue refused it: {exc}", messages.ERROR)
            return back
        link = reverse("admin:nrllm_agents_agentrun_change", args=[run_id])
        self.message_user(
            request, format_html('Posted: run <a href="{}">{}</a> answers it.', link, run_id), messages.SUCCESS
        )
        return back
