"""Issue 9 finding 9: the playground shares the API's rate limits, across processes, and its
interactive runs execute on a bounded pool.

Guards: 200 playground starts were accepted in 4.6 s, each starting a thread that held a
database connection, while the API stopped at 120 a minute; and the API's counters lived in
a per-process cache, so every extra process multiplied the limit.
"""

from __future__ import annotations

import copy

import pytest
from django.test import Client
from rest_framework.test import APIClient

from nrllm_agents import admission
from nrllm_agents.models import AgentRun, RunStatus
from nrllm_agents.web import interactive
from tests.conftest import manage

JSON = {"Accept": "application/json"}
QUICK = '[{"content": "42"}]'


def form(script: str = QUICK, tools: tuple[str, ...] = ()) -> dict:
    return {
        "prompt": "p",
        "provider": "scripted",
        "model": "",
        "tools": list(tools),
        "max_iterations": "50",
        "script": script,
        "mode": "queued",
    }


@pytest.fixture
def rates(settings):
    def set_rate(scope: str, rate: str) -> None:
        rest = copy.deepcopy(settings.REST_FRAMEWORK)
        rest["DEFAULT_THROTTLE_RATES"][scope] = rate
        settings.REST_FRAMEWORK = rest

    admission.reset()
    yield set_rate
    admission.reset()


@pytest.fixture
def web(settings):
    settings.REDIS_URL = None


@pytest.mark.django_db
def test_the_playground_and_the_api_draw_on_one_limit(alice, rates, web, settings):
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "QUEUED_SWEEP_SECONDS": 0}
    rates("run_create", "3/min")
    browser, api = Client(), APIClient()
    browser.force_login(alice)
    api.force_authenticate(alice)
    assert browser.post("/playground/runs/", form(), headers=JSON).status_code == 202
    assert api.post("/api/runs/", {"prompt": "p", "script": [{"content": "x"}]}, format="json").status_code == 202
    assert browser.post("/playground/runs/", form(), headers=JSON).status_code == 202
    refused = browser.post("/playground/runs/", form(), headers=JSON)
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    assert refused.json()["detail"].startswith("Too many requests; try again in ")
    assert api.post("/api/runs/", {"prompt": "p"}, format="json").status_code == 429
    as_form = browser.post("/playground/runs/", form(), follow=True)
    assert "Too many requests" in as_form.content.decode()
    assert AgentRun.objects.count() == 3


@pytest.mark.django_db(transaction=True)
def test_limits_are_counted_in_a_store_every_process_shares(alice, rates, child_env):
    # Per day, not per minute: the weighted window lets a new minute's first seconds take one
    # more than the limit's rest (floor(2 x 0.99) = 1 counted of the last minute's 2), and the
    # other process's start-up takes seconds, so a minute's turn fell between it and this one.
    rates("run_create", "2/day")
    # Another process (its own memory) spends alice's two starts.
    script = (
        "import django; django.setup()\n"
        "from django.contrib.auth import get_user_model\n"
        "from rest_framework.test import APIClient\n"
        "c = APIClient(); c.force_authenticate(get_user_model().objects.get(username='alice'))\n"
        "from django.test import override_settings\n"
        "import copy; from django.conf import settings\n"
        "r = copy.deepcopy(settings.REST_FRAMEWORK); r['DEFAULT_THROTTLE_RATES']['run_create'] = '2/day'\n"
        "with override_settings(REST_FRAMEWORK=r, ALLOWED_HOSTS=['testserver']):\n"
        "    print([c.post('/api/runs/', {'prompt': ''}, format='json').status_code for _ in range(2)])\n"
    )
    proc = manage("shell", "-c", script, env=child_env)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and out.strip().splitlines()[-1] == "[400, 400]", (out, err)  # bad bodies count
    browser = Client()
    browser.force_login(alice)
    assert browser.post("/playground/runs/", form(), headers=JSON).status_code == 429


@pytest.mark.django_db(transaction=True)
def test_interactive_runs_beyond_the_pool_are_refused_with_a_message(alice, settings, web):
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "INTERACTIVE_WORKERS": 1}
    browser = Client()
    browser.force_login(alice)
    slow = '[{"tool_calls": [{"name": "sleep", "arguments": {"seconds": 3}}]}, {"content": "done"}]'
    body = {**form(slow, ("sleep",)), "mode": "interactive"}
    first = browser.post("/playground/runs/", body, headers=JSON)
    assert first.status_code == 201, first.content
    second = browser.post("/playground/runs/", body, headers=JSON)
    assert second.status_code == 503
    assert "1 interactive runs are already executing" in second.json()["detail"]
    assert AgentRun.objects.count() == 1
    assert interactive.wait_idle(30)
    assert AgentRun.objects.get().status == RunStatus.COMPLETED
    third = browser.post("/playground/runs/", {**body, "script": QUICK}, headers=JSON)
    assert third.status_code == 201, third.content
    assert interactive.wait_idle(30)
