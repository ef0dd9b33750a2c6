"""Issue 20 items 5, 7 and 8 on the playground and the API (PostgreSQL and SQLite).

Guards:
- the playground's fork was not rate-limited (150 runs in 4.6 s), answered 500 at interactive
  capacity, and 500 for ``from_sequence=²``, ``①`` or 5,000 digits;
- the interactive slots were shared by everyone in a process: one user could take all 8;
- the scripted provider (a test double) was open to every user with debug off, and a run that
  set no deadline had none.
"""

from __future__ import annotations

import copy

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.urls import reverse
from rest_framework.test import APIClient

from nrllm_agents.models import AgentRun, RunStatus
from nrllm_agents.validation.run_request import RunRequest
from nrllm_agents.web import interactive
from tests import waits

from .test_forks import cancelled_run
from .test_playground import JSON, form, signed_in, web  # noqa: F401

SLEEPY = '[{"tool_calls": [{"name": "sleep", "arguments": {"seconds": 3}}]}, {"content": "done"}]'


def fork(client, run, **data):
    return client.post(reverse("nrllm_web:fork", args=[run.pk]), data, headers=JSON)


def create_rate(settings, rate: str) -> None:
    rest = copy.deepcopy(django_settings.REST_FRAMEWORK)
    rest["DEFAULT_THROTTLE_RATES"]["run_create"] = rate
    settings.REST_FRAMEWORK = rest


# transaction=True: interactive runs and forks execute on background threads of the web process.
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("raw", ["²", "①", "٣", "9" * 5000, "-1", "1.0"])
def test_a_malformed_fork_point_is_a_message_not_a_500(web, alice, runtime, raw):
    parent = cancelled_run(runtime, alice)
    response = fork(signed_in(alice), parent, from_sequence=raw)
    assert response.status_code == 400, response.content
    assert "Choose a step to continue from" in response.json()["message"]
    as_form = signed_in(alice).post(reverse("nrllm_web:fork", args=[parent.pk]), {"from_sequence": raw}, follow=True)
    assert "Choose a step to continue from" in as_form.content.decode()
    assert AgentRun.objects.count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("value", ["²", "12", "9" * 5000, 1.5, True, -1, 2**63])
def test_the_api_fork_refuses_a_malformed_fork_point_with_400(alice, runtime, value):
    parent = cancelled_run(runtime, alice)
    api = APIClient()
    api.force_authenticate(alice)
    response = api.post(f"/api/runs/{parent.pk}/fork/", {"from_sequence": value}, format="json")
    assert response.status_code == 400 and "from_sequence" in response.json(), response.content
    huge = api.post(
        f"/api/runs/{parent.pk}/fork/", data='{"from_sequence": ' + "9" * 5000 + "}", content_type="application/json"
    )
    assert huge.status_code == 400 and "detail" in huge.json()
    assert AgentRun.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_playground_fork_spends_the_create_limit(web, alice, runtime, settings):
    parent = cancelled_run(runtime, alice)
    create_rate(settings, "2/min")  # counted in the database here, which each test starts empty
    client = signed_in(alice)
    assert fork(client, parent).status_code == 201
    assert client.post(reverse("nrllm_web:start"), form(), headers=JSON).status_code == 201
    refused = fork(client, parent)
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    assert refused.json()["detail"].startswith("Too many requests; try again in ")
    assert interactive.wait_idle(30)
    assert AgentRun.objects.count() == 3


@pytest.mark.django_db(transaction=True)
def test_the_playground_fork_at_capacity_is_a_message_not_a_500(web, alice, runtime, settings):
    parent = cancelled_run(runtime, alice)
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "INTERACTIVE_WORKERS": 1}
    client = signed_in(alice)
    assert client.post(reverse("nrllm_web:start"), form(SLEEPY, ("sleep",)), headers=JSON).status_code == 201
    busy = fork(client, parent)
    assert busy.status_code == 503, busy.content
    assert "1 interactive runs are already executing" in busy.json()["message"]
    assert interactive.wait_idle(30)


@pytest.mark.django_db(transaction=True)
def test_one_user_cannot_take_every_interactive_slot(web, alice, bob, settings):
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "INTERACTIVE_WORKERS": 8, "INTERACTIVE_MAX_PER_USER": 2}
    client = signed_in(alice)
    slow = form(SLEEPY, ("sleep",))
    assert [client.post(reverse("nrllm_web:start"), slow, headers=JSON).status_code for _ in range(2)] == [201, 201]
    third = client.post(reverse("nrllm_web:start"), slow, headers=JSON)
    assert third.status_code == 503
    assert "You already have 2 interactive runs executing" in third.json()["detail"]
    assert signed_in(bob).post(reverse("nrllm_web:start"), form(), headers=JSON).status_code == 201
    assert interactive.wait_idle(30)
    assert AgentRun.objects.filter(owner=alice).count() == 2


@pytest.fixture
def production(settings):
    """Debug off and ``ALLOW_SCRIPTED`` unset: as a deploy that follows the README."""
    settings.DEBUG = False
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "ALLOW_SCRIPTED": None}
    return settings


@pytest.mark.django_db(transaction=True)
def test_in_production_users_cannot_start_scripted_runs(web, production, alice, runtime):
    parent = cancelled_run(runtime, alice)  # the runtime itself (commands, tests) may
    api = APIClient()
    api.force_authenticate(alice)
    refused = api.post("/api/runs/", {"prompt": "p", "script": [{"content": "x"}]}, format="json")
    assert refused.status_code == 400 and "test double" in refused.json()["provider"][0]
    assert api.post("/api/runs/", {"prompt": "p", "provider": "scripted"}, format="json").status_code == 400
    assert api.post(f"/api/runs/{parent.pk}/fork/", {}, format="json").status_code == 400
    client = signed_in(alice)
    page = client.get(reverse("nrllm_web:playground")).content.decode()
    assert 'value="scripted"' not in page and 'value="openai"' in page
    started = client.post(reverse("nrllm_web:start"), form(), headers=JSON)
    assert started.status_code == 400 and "provider" in started.json()["errors"]
    forked = fork(client, parent)
    assert forked.status_code == 400 and "test double" in forked.json()["message"]
    assert AgentRun.objects.count() == 1
    # The operator's commands keep it.
    call_command("agent_run", "p", "--script", '[{"content": "ok"}]', "--json")
    assert AgentRun.objects.filter(status=RunStatus.COMPLETED).count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("debug", "allow"), [(True, None), (False, True)])
def test_development_or_the_setting_opens_the_scripted_provider(web, settings, alice, debug, allow):
    settings.DEBUG = debug
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "ALLOW_SCRIPTED": allow}
    api = APIClient()
    api.force_authenticate(alice)
    body = {"prompt": "p", "script": [{"content": "x"}], "tools": [], "mode": "sync"}
    assert api.post("/api/runs/", body, format="json").status_code == 201
    assert 'value="scripted"' in signed_in(alice).get(reverse("nrllm_web:playground")).content.decode()


def test_a_run_that_sets_no_deadline_gets_the_default_hour():
    request = RunRequest.from_mapping({"prompt": "p"})
    assert request.deadline_seconds == 3600 and request.row_fields()["deadline_at"] is not None
    assert RunRequest.from_mapping({"prompt": "p", "deadline_seconds": None}).deadline_seconds is None


@pytest.mark.django_db(transaction=True)
def test_a_sync_approval_and_a_sync_fork_take_a_sync_slot(alice, runtime):
    """The request's thread executes them like a ``mode: sync`` create, so the same cap holds."""
    from nrllm_agents import admission

    note = [{"tool_calls": [{"name": "write_note", "arguments": {"title": "t", "body": "b"}}]}, {"content": "ok"}]
    waiting = runtime.run({"prompt": "p", "tools": ["write_note"], "script": note}, owner=alice).run_id
    parent = cancelled_run(runtime, alice)
    api = APIClient()
    api.force_authenticate(alice)
    held = [admission.hold(admission.Kind.SYNC, alice.pk) for _ in range(2)]  # the default cap: 2
    try:
        refused = api.post(f"/api/runs/{waiting}/approve/", {"approved": True}, format="json")
        assert refused.status_code == 429 and "sync runs" in refused.json()["detail"]
        forked = api.post(f"/api/runs/{parent.pk}/fork/", {"mode": "sync"}, format="json")
        assert forked.status_code == 429 and AgentRun.objects.filter(parent=parent).count() == 0
        assert (
            api.post(f"/api/runs/{waiting}/approve/", {"approved": True, "queued": True}, format="json").status_code
            == 202
        )
    finally:
        for slot in held:
            slot.release()
    assert admission.in_use(admission.Kind.SYNC) == (0, {})
    assert waits.wait_local_idle(30)  # the queued approval executes in this process
