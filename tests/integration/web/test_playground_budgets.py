"""The playground shows the user their budgets, and a run a budget refuses gets the API's words."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from nrllm_agents.models import AgentRun, Budget

pytestmark = pytest.mark.django_db

JSON = {"Accept": "application/json"}


def form(mode: str) -> dict:
    return {
        "prompt": "p",
        "provider": "scripted",
        "model": "",
        "tools": [],
        "max_iterations": "5",
        "script": '[{"content": "42"}]',
        "mode": mode,
    }


def test_the_playground_lists_the_budgets_covering_the_user_and_no_others(client, alice, bob):
    team = Group.objects.create(name="research")
    alice.groups.add(team)
    Budget.objects.create(
        scope="group", group=team, window="month", max_cost=Decimal("200"), spent_cost=Decimal("12.5")
    )
    Budget.objects.create(scope="user", user=bob, window="day", max_runs=3)
    client.force_login(alice)
    page = client.get(reverse("nrllm_web:playground")).content.decode()
    assert "Your budgets" in page and "group research per month" in page and "187.5 USD left of 200" in page
    assert "user bob" not in page


@pytest.mark.parametrize(
    "mode",
    [
        "queued",
        # an interactive run starts on a thread of the pool, its own connection: it must see commits
        pytest.param("interactive", marks=pytest.mark.django_db(transaction=True)),
    ],
)
def test_a_run_refused_by_a_budget_is_a_429_with_the_same_words(client, alice, mode):
    Budget.objects.create(scope="user", user=alice, window="day", max_runs=0)
    client.force_login(alice)
    answer = client.post(reverse("nrllm_web:start"), form(mode), headers=JSON)
    assert answer.status_code == 429
    assert "budget of user alice per day is exhausted: 0 runs left of 0" in answer.json()["detail"]
    assert not AgentRun.objects.exists()
