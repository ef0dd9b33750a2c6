"""``/api/budgets/``: staff write, everyone reads their own; a refused run answers 429 naming the budget."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.contrib.auth.models import Group, Permission

from nrllm_agents.models import AgentRun, Budget
from nrllm_agents.money import pricing

from .conftest import token_client

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(staff):
    """Staff holding every budget permission (budgets ask for them, as connections do)."""
    staff.user_permissions.add(*Permission.objects.filter(codename__endswith="_budget"))
    return staff


def test_staff_set_budgets_and_everyone_reads_only_the_ones_covering_them(alice, bob, staff):
    team = Group.objects.create(name="research")
    alice.groups.add(team)
    admin = token_client(staff)
    made = admin.post(
        "/api/budgets/", {"scope": "user", "subject": "alice", "window": "day", "max_cost": "5.00"}, format="json"
    )
    assert made.status_code == 201 and made.json()["left_cost"] == "5" and made.json()["resets_at"]
    again = admin.post(
        "/api/budgets/", {"scope": "user", "subject": "alice", "window": "day", "max_cost": "6"}, format="json"
    )
    assert again.status_code == 200 and Budget.objects.get().max_cost == Decimal(6)
    admin.post(
        "/api/budgets/", {"scope": "group", "subject": "research", "window": "month", "max_tokens": 500}, format="json"
    )
    admin.post("/api/budgets/", {"scope": "user", "subject": "bob", "window": "total", "max_runs": 3}, format="json")
    mine = token_client(alice).get("/api/budgets/").json()
    assert sorted(b["subject"] for b in mine) == ["group research", "user alice"]
    assert [b["subject"] for b in token_client(bob).get("/api/budgets/").json()] == ["user bob"]
    assert len(admin.get("/api/budgets/").json()) == 3
    bobs = Budget.objects.get(user=bob).pk
    assert token_client(alice).get(f"/api/budgets/{bobs}/").status_code == 404
    assert token_client(bob).delete(f"/api/budgets/{bobs}/").status_code == 403
    assert (
        token_client(alice)
        .post("/api/budgets/", {"scope": "everyone", "window": "day", "max_runs": 1}, format="json")
        .status_code
        == 403
    )


@pytest.mark.parametrize(
    "body",
    [
        {"scope": "user", "subject": "nobody", "window": "day", "max_cost": "1"},
        {"scope": "user", "subject": "alice", "window": "week", "max_cost": "1"},
        {"scope": "everyone", "window": "day"},
        {"scope": "everyone", "window": "day", "max_cost": "NaN"},
        {"scope": "everyone", "window": "day", "max_cost": "-1"},
        {"scope": "everyone", "window": "day", "max_cost": "1e400"},
    ],
)
def test_a_bad_budget_is_a_400_with_detail(staff, alice, body):
    answer = token_client(staff).post("/api/budgets/", body, format="json")
    assert answer.status_code == 400 and answer.json()
    assert not Budget.objects.exists()


def test_a_run_refused_by_a_budget_is_a_429_naming_it(api, alice):
    Budget.objects.create(scope="user", user=alice, window="day", max_runs=1)
    assert api.post("/api/runs/", {"prompt": "p"}, format="json").status_code in (201, 202)
    refused = api.post("/api/runs/", {"prompt": "p"}, format="json")
    assert refused.status_code == 429
    body = refused.json()
    assert "budget of user alice per day is exhausted: 0 runs left of 1" in body["detail"]
    assert body["budget"]["ceiling"] == "runs" and body["budget"]["resets_at"]
    assert AgentRun.objects.count() == 1


def test_budgets_ask_for_the_budget_permissions_as_connections_do(make_user, alice):
    """Staff holding no budget permission: 403 with a JSON detail for every write, and only the
    budgets covering their own runs to read, as any user; each permission opens its own action."""
    clerk = make_user("clerk", staff=True)
    Budget.objects.create(scope="user", user=alice, window="day", max_runs=5)
    everyone = {"scope": "everyone", "window": "day", "max_runs": 1}
    refused = token_client(clerk).post("/api/budgets/", everyone, format="json")
    assert refused.status_code == 403 and "budget permission" in refused.json()["detail"]
    alices = Budget.objects.get().pk
    assert token_client(clerk).get("/api/budgets/").json() == []  # alice's budget covers no run of theirs
    assert token_client(clerk).delete(f"/api/budgets/{alices}/").status_code == 404
    clerk.user_permissions.add(Permission.objects.get(codename="view_budget"))
    clerk = type(clerk).objects.get(pk=clerk.pk)  # permissions are cached on the instance
    assert [b["id"] for b in token_client(clerk).get("/api/budgets/").json()] == [alices]
    denied = token_client(clerk).delete(f"/api/budgets/{alices}/")
    assert denied.status_code == 403 and denied.json()["detail"]
    change = {"scope": "user", "subject": "alice", "window": "day", "max_runs": 1}
    assert token_client(clerk).post("/api/budgets/", change, format="json").status_code == 403
    clerk.user_permissions.add(Permission.objects.get(codename="add_budget"))
    clerk = type(clerk).objects.get(pk=clerk.pk)
    assert token_client(clerk).post("/api/budgets/", everyone, format="json").status_code == 201
    assert token_client(clerk).post("/api/budgets/", change, format="json").status_code == 403  # a change
    assert Budget.objects.get(user=alice).max_runs == 5


def test_a_run_whose_first_call_does_not_fit_what_is_left_is_a_429_naming_the_budget(api, alice, settings):
    """Issue 44: the worst case of the first call (prompt and 1,000 tokens at 50 per million,
    about 0.05) against 0.02 left of 0.10: refused as an exhausted budget is, nothing counted."""
    settings.NRLLM_AGENTS = {**getattr(settings, "NRLLM_AGENTS", {}), "BUDGET_MAX_TOKENS": 1000}
    pricing.set_price(
        model="scripted-demo", provider="scripted", input_per_million=Decimal(50), output_per_million=Decimal(50)
    )
    budget = Budget.objects.create(
        scope="user", user=alice, window="day", max_cost=Decimal("0.10"), spent_cost=Decimal("0.08")
    )
    refused = api.post("/api/runs/", {"prompt": "p"}, format="json")
    assert refused.status_code == 429
    body = refused.json()
    assert "budget of user alice per day is exhausted: 0.02 USD left of 0.1" in body["detail"]
    assert body["budget"] == {**body["budget"], "budget": budget.pk, "ceiling": "cost"}
    assert not AgentRun.objects.exists() and Budget.objects.get().runs == 0
    Budget.objects.update(spent_cost=Decimal("0.04"))  # 0.06 left: room for the worst case
    assert api.post("/api/runs/", {"prompt": "p"}, format="json").status_code in (201, 202)
