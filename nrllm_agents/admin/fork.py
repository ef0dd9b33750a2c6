"""The admin's "Fork selected runs" action: continue each selected stopped run as a new run.

Each fork starts from its parent's default point (the last step before the stop), is
queued for a worker and is owned by the operator; the parent is not changed. The summary
says per outcome what happened, with a link to each new run. Each fork spends one attempt of
the create rate limit (``admission``), like a run started anywhere else.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import ModelAdmin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from .. import admission
from ..access import policy
from ..admission.budgets import BudgetRefused
from ..executors.dispatch import EnqueueError
from ..models import AgentRun
from ..runtime.agent_runtime import AgentRuntime, RunNotFound
from ..runtime.forks import NotForkable
from ..validation.run_request import InvalidRequest

FORK_MAX_RUNS = 20  # forks start paid work: a bigger selection is refused, not silently cut


@admin.action(description="Fork selected runs (continue each from its last step before the stop)", permissions=["fork"])
def fork_selected(modeladmin: ModelAdmin[Any], request: HttpRequest, queryset: QuerySet[AgentRun]) -> None:
    """Queue a fork of each selected run, owned by the operator; report the forks and each refusal."""
    runs = list(queryset.order_by("created_at").values_list("pk", flat=True)[: FORK_MAX_RUNS + 1])
    if len(runs) > FORK_MAX_RUNS:
        modeladmin.message_user(
            request, f"Select at most {FORK_MAX_RUNS} runs to fork; nothing was forked.", messages.ERROR
        )
        return
    forked: list[Any] = []
    refused: list[str] = []
    for i, parent in enumerate(runs):
        limited = admission.take(request, admission.Action.CREATE)  # each fork is a new run
        if limited is not None:
            refused.append(f"{len(runs) - i} run(s): {limited.detail}")
            break
        try:
            forked.append(AgentRuntime().fork(parent, owner=request.user).run_id)
        except (NotForkable, InvalidRequest, RunNotFound, EnqueueError, BudgetRefused, policy.UseRefused) as exc:
            refused.append(f"{parent}: {exc}")
    if forked:
        links = format_html_join(
            ", ",
            '<a href="{}">{}</a>',
            ((reverse("admin:nrllm_agents_agentrun_change", args=[pk]), pk) for pk in forked),
        )
        modeladmin.message_user(request, format_html("{} fork(s) queued: {}", len(forked), links), messages.SUCCESS)
    for line in refused:
        modeladmin.message_user(request, f"Not forked: {line}", messages.WARNING)
