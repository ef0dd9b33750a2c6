"""The playground: limits in the form and on the run page, and "Continue from here" (PostgreSQL and SQLite)."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from nrllm_agents.models import AgentRun, CancelSource
from nrllm_agents.web import interactive

from .test_playground import JSON, form, signed_in, web  # noqa: F401

TWO_CALLS = {
    "tool_calls": [
        {"name": "calculator", "arguments": {"expression": "1+1"}},
        {"name": "calculator", "arguments": {"expression": "2+2"}},
    ],
    "usage": {"prompt_tokens": 30, "completion_tokens": 30},
}


def cancelled_run(runtime, owner) -> AgentRun:
    def observe(step):
        if step["kind"] == "llm":
            runtime.cancel(step["run_id"], source=CancelSource.PLAYGROUND)

    result = runtime.run(
        {"prompt": "add", "tools": ["calculator"], "script": [TWO_CALLS, {"content": "4"}]},
        owner=owner,
        on_step=observe,
    )
    return AgentRun.objects.get(pk=result.run_id)


# transaction=True: interactive runs execute on a background thread of the web process.
@pytest.mark.django_db(transaction=True)
def test_the_form_takes_limits_and_the_page_shows_the_limit_that_stopped_the_run(web, alice):
    client = signed_in(alice)
    script = json.dumps([TWO_CALLS, {"content": "4"}])
    response = client.post(
        reverse("nrllm_web:start"), form(script, max_total_tokens="50", deadline_seconds="600"), headers=JSON
    )
    assert response.status_code == 201, response.content
    assert interactive.wait_idle(30)
    run = AgentRun.objects.get()
    assert (run.termination_reason, run.max_total_tokens, run.deadline_seconds) == ("budget_exceeded", 50, 600)
    page = client.get(reverse("nrllm_web:run", args=[run.pk])).content.decode()
    assert 'id="st-budget">50<' in page and 'id="st-deadline"><span title="600 s">10 min<' in page  # humanised
    assert "token budget exceeded: 60 tokens spent of 50" in page and "max_total_tokens 50: measured 60 tokens" in page
    response = client.post(reverse("nrllm_web:start"), form(script, max_total_tokens="0"), headers=JSON)
    assert response.status_code == 400 and "max_total_tokens" in response.json()["errors"]


@pytest.mark.django_db(transaction=True)
def test_continue_from_here_forks_the_run_and_links_both_ways(web, alice, bob, runtime):
    parent = cancelled_run(runtime, alice)
    client = signed_in(alice)
    page = client.get(reverse("nrllm_web:run", args=[parent.pk])).content.decode()
    # In the menus of the request and llm steps, not the cancelled one's; each with its "with changes".
    assert page.count(">Continue from here</button>") == page.count(">Continue from here with changes…</a>") == 2
    url = reverse("nrllm_web:fork", args=[parent.pk])
    assert signed_in(bob).post(url, {"from_sequence": "1"}).status_code == 404  # bob may not see it
    response = client.post(url, {"from_sequence": "1"})
    assert response.status_code == 302
    fork = AgentRun.objects.get(parent=parent)
    assert response["Location"] == reverse("nrllm_web:run", args=[fork.pk]) and fork.owner == alice
    assert interactive.wait_idle(30)
    fork.refresh_from_db()
    assert (fork.status, fork.final_text, fork.forked_from_sequence) == ("completed", "4", 1)
    page = client.get(reverse("nrllm_web:run", args=[fork.pk])).content.decode()
    assert 'id="parent-link"' in page and "forked from" in page and "not executed: the run was cancelled" in page
    page = client.get(reverse("nrllm_web:run", args=[parent.pk])).content.decode()
    assert reverse("nrllm_web:run", args=[fork.pk]) in page
    for bad in ("x", "-1", "9"):
        response = client.post(url, {"from_sequence": bad}, headers=JSON)
        assert response.status_code == 400, bad
    assert AgentRun.objects.filter(parent=parent).count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_fork_from_the_playground_can_change_the_model_the_script_and_the_limits(web, alice, runtime):
    parent = cancelled_run(runtime, alice)
    client = signed_in(alice)
    url = reverse("nrllm_web:fork", args=[parent.pk])
    changes = {
        "from_sequence": "1",
        "model": "other-model",
        "max_iterations": "7",
        "deadline_seconds": "30",
        "max_total_tokens": "900",
        "script": '[{"content": "changed"}]',
    }
    assert client.post(url, changes).status_code == 302
    fork = AgentRun.objects.get(parent=parent)
    assert interactive.wait_idle(30)
    fork.refresh_from_db()
    assert (fork.model, fork.options["max_iterations"], fork.deadline_seconds, fork.max_total_tokens) == (
        "other-model",
        7,
        30,
        900,
    )
    assert (fork.status, fork.final_text) == ("completed", "changed")
    bad = client.post(url, {**changes, "script": "[not json"}, HTTP_ACCEPT="application/json")
    assert bad.status_code == 400 and "script" in bad.json()["message"]
    assert AgentRun.objects.filter(parent=parent).count() == 1  # nothing started for the bad one
