"""The admin shows limits and fork links, and forks selected runs (PostgreSQL and SQLite)."""

from __future__ import annotations

import pytest
from django.contrib import messages
from django.urls import reverse

from nrllm_agents.models import AgentRun, RunStatus

from .test_runs import change_url, completed, op_client, operator, shown, viewer, waiting  # noqa: F401

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:nrllm_agents_agentrun_changelist")
BUDGET = [
    {
        "tool_calls": [{"name": "calculator", "arguments": {"expression": "1"}}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 20},
    },
    {"content": "x"},
]


def test_fork_action_queues_forks_of_stopped_runs_and_refuses_active_ones(
    op_client, operator, runtime, settings, redis_url
):
    settings.REDIS_URL = redis_url  # no worker reads it: the forks stay queued
    settings.RQ_QUEUES = {"default": {"URL": redis_url}}
    done, pending = completed(runtime), waiting(runtime)
    response = op_client.post(
        CHANGELIST, {"action": "fork_selected", "_selected_action": [str(done), str(pending)]}, follow=True
    )
    fork = AgentRun.objects.get(parent_id=done)
    assert fork.status == RunStatus.QUEUED and fork.owner == operator
    said = shown(response)
    assert said[0][0] == messages.SUCCESS and "1 fork(s) queued" in said[0][1] and str(fork.pk) in said[0][1]
    assert said[1][0] == messages.WARNING and str(pending) in said[1][1] and "waiting_for_approval" in said[1][1]
    assert not AgentRun.objects.filter(parent_id=pending).exists()


def test_a_runs_page_shows_limits_the_limit_that_fired_and_fork_links(op_client, runtime):
    result = runtime.run({"prompt": "p", "tools": ["calculator"], "script": BUDGET, "max_total_tokens": 40})
    parent = AgentRun.objects.get(pk=result.run_id)
    assert parent.termination_reason == "budget_exceeded"
    fork = runtime.fork(parent.pk, queued=False, overrides={"max_total_tokens": 1000})
    page = op_client.get(change_url(parent.pk)).content.decode()
    assert "Budget Exceeded" in page and "max_total_tokens 40: measured 50 tokens" in page
    assert change_url(fork.run_id) in page and 'id="fork-run-form"' in page
    page = op_client.get(change_url(fork.run_id)).content.decode()
    assert change_url(parent.pk) in page and "forked from" in page and "at step #1" in page


def test_viewers_may_fork_but_active_runs_have_no_fork_button(client, viewer, runtime):
    client.force_login(viewer)
    page = client.get(change_url(waiting(runtime))).content.decode()
    assert 'id="fork-run-form"' not in page


def test_the_fork_action_spends_the_create_limit_per_fork(op_client, runtime, settings):
    """Issue 20 item 4: every way of creating a run asks the one rate limiter, the admin's too."""
    import copy

    rest = copy.deepcopy(settings.REST_FRAMEWORK)
    rest["DEFAULT_THROTTLE_RATES"]["run_create"] = "2/min"
    settings.REST_FRAMEWORK = rest
    settings.REDIS_URL = None  # counted in the database, which each test starts empty
    parents = [completed(runtime) for _ in range(3)]
    response = op_client.post(
        CHANGELIST, {"action": "fork_selected", "_selected_action": [str(p) for p in parents]}, follow=True
    )
    said = shown(response)
    assert "2 fork(s) queued" in said[0][1]
    assert said[1][0] == messages.WARNING and "1 run(s): Too many requests; try again in" in said[1][1]
    assert AgentRun.objects.filter(parent_id__in=parents).count() == 2
