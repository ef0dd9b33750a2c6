"""Issue 32 finding 7: money is a plain decimal on every surface.

Guards: ``max_cost: "1_000"`` was 1000, ``" 1 "`` was 1, ``agent_prices set --input 1_0``
stored 10 and a fullwidth ``１`` stored 1, because each surface handed the text to ``Decimal()``
(which takes underscores, spaces, exponents and any Unicode digit). Each surface now reads the
text through ``money.parsing``; a fuzz of each answers only 2xx or a clear 4xx (or exit 2).
"""

from __future__ import annotations

import itertools
import json
from decimal import Decimal
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from nrllm_agents import admission
from nrllm_agents.catalog import budgets
from nrllm_agents.http.edge import NUL_DETAIL
from nrllm_agents.models import AgentRun, Budget, Price
from nrllm_agents.money import parsing

pytestmark = pytest.mark.django_db
LOOSE = ["1_000", " 1 ", "1_0", "\uff11", "1e3", "1E-3", "+1", "-1", "1.2.3", "NaN", "Infinity", "١", "0x10", "1,5", ""]
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
# Mostly near-decimals: digits, dots, signs, underscores, spaces, exponents, non-ASCII digits.
TEXT = st.one_of(
    st.text(alphabet=st.sampled_from("0123456789._-+eE \t\uff11\u0661,"), max_size=12),
    st.text(max_size=8),
    st.decimals(allow_nan=True, allow_infinity=True).map(str),
)


def accepted(text: str, bounds: parsing.Bounds) -> bool:
    try:
        parsing.parse(text, bounds)
    except parsing.InvalidAmount:
        return False
    return True


@pytest.fixture(autouse=True)
def _no_rate_limits(settings):
    admission.reset()
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_CLASSES": []}
    settings.REDIS_URL = None
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "QUEUED_SWEEP_SECONDS": 0, "EXECUTOR": "local"}
    yield
    admission.reset()


def test_the_parser_takes_plain_decimals_only():
    bounds = parsing.PRICE
    assert parsing.parse("2.5", bounds) == Decimal("2.5")
    assert parsing.parse("0", bounds) == 0
    assert parsing.parse(".5", bounds) == Decimal("0.5")
    assert parsing.parse("1.", bounds) == 1
    assert parsing.parse(3, bounds) == 3 and parsing.parse(0.25, bounds) == Decimal("0.25")
    assert parsing.parse("1000000", bounds) == 1000000
    # zeros past the places fit the column: the admin's model validation once refused them
    assert parsing.parse("1.50000000", bounds).as_tuple().exponent == -parsing.PRICE_PLACES
    for bad in [*LOOSE, "1000000.1", "0.0000001", True, None, [], {"amount": "1"}, float("nan"), 1e-7, -1]:
        with pytest.raises(parsing.InvalidAmount) as refused:
            parsing.parse(bad, bounds)
        assert "plain decimal" in str(refused.value) and "1000000" in str(refused.value)
    with pytest.raises(parsing.InvalidAmount):
        parsing.parse("0", parsing.cost_limit("10"))  # a cost limit is above 0


@pytest.mark.parametrize("loose", LOOSE)
def test_the_api_refuses_a_loose_max_cost(alice, loose):
    api = APIClient()
    api.force_authenticate(alice)
    answer = api.post("/api/runs/", {"prompt": "p", "script": [{"content": "x"}], "max_cost": loose}, format="json")
    assert answer.status_code == 400, answer.content
    assert "plain decimal" in str(answer.json())
    assert not AgentRun.objects.exists()


def test_the_api_takes_a_plain_max_cost(alice):
    api = APIClient()
    api.force_authenticate(alice)
    for value, stored in (("0.50", Decimal("0.5")), (2, Decimal(2)), (0.25, Decimal("0.25"))):
        answer = api.post("/api/runs/", {"prompt": "p", "script": [{"content": "x"}], "max_cost": value}, format="json")
        assert answer.status_code == 202, answer.content
        assert AgentRun.objects.get(pk=answer.json()["run_id"]).max_cost == stored


def test_an_agent_definition_refuses_a_loose_max_cost(django_user_model):
    api = APIClient()
    api.force_authenticate(django_user_model.objects.create_superuser("op", "op@example.com", "pw"))
    answer = api.post("/api/agents/", {"name": "a", "definition": {"max_cost": "1_000"}}, format="json")
    assert answer.status_code == 400 and "plain decimal" in str(answer.json()), answer.content


@pytest.mark.parametrize("loose", ["1_0", " 1 ", "\uff11", "1e1"])
def test_agent_prices_set_refuses_a_loose_price_with_exit_2(loose):
    with pytest.raises(CommandError) as refused:
        call_command("agent_prices", "set", "--provider", "scripted", "--model", "m", "--input", loose, "--output", "1")
    assert refused.value.returncode == 2 and "\n" not in str(refused.value)
    assert "--input: a plain decimal" in str(refused.value)
    assert not Price.objects.exists()


def test_agent_run_refuses_a_loose_max_cost_with_exit_2():
    with pytest.raises(CommandError) as refused:
        call_command("agent_run", "p", "--script", '[{"content": "x"}]', "--max-cost", "1_000", stdout=StringIO())
    assert refused.value.returncode == 2 and "plain decimal" in str(refused.value)
    assert not AgentRun.objects.exists()


def admin_price_form(value: str) -> dict[str, str]:
    return {
        "connection": "",
        "provider": "scripted",
        "model": "m",
        "input_per_million": value,
        "output_per_million": "1",
    }


def budget_form(max_cost: str) -> dict[str, str]:
    # a runs ceiling too: an empty cost is then "no cost ceiling", not a budget without any
    return {"scope": "everyone", "window": "day", "max_cost": max_cost, "max_tokens": "", "max_runs": "1"}


# The admin's money fields: the form, the table and the column each one fills.
ADMIN_AMOUNTS = {"price": (admin_price_form, Price, "input_per_million"), "budget": (budget_form, Budget, "max_cost")}


@pytest.mark.parametrize("model", sorted(ADMIN_AMOUNTS))
@pytest.mark.parametrize("loose", ["1_0", " 1 ", "\uff11", "1e1", "-1"])
def test_the_admin_refuses_a_loose_amount(django_user_model, model, loose):
    form, table, column = ADMIN_AMOUNTS[model]
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("op", "op@example.com", "pw"))
    answer = client.post(f"/admin/nrllm_agents/{model}/add/", form(loose))
    assert answer.status_code == 200 and "plain decimal" in answer.content.decode()
    assert not table.objects.exists()
    assert client.post(f"/admin/nrllm_agents/{model}/add/", form("2.50000000000000")).status_code == 302
    assert getattr(table.objects.get(), column) == Decimal("2.5")


def playground_form(max_cost: str) -> dict[str, object]:
    return {
        "prompt": "p",
        "provider": "scripted",
        "model": "",
        "max_iterations": "5",
        "script": '[{"content": "x"}]',
        "mode": "queued",
        "max_cost": max_cost,
    }


@pytest.mark.parametrize("loose", ["1_0", " 1 ", "\uff11", "1e1"])
def test_the_playground_refuses_a_loose_cost_limit(alice, loose):
    browser = Client()
    browser.force_login(alice)
    answer = browser.post("/playground/runs/", playground_form(loose), headers={"Accept": "application/json"})
    assert answer.status_code == 400 and "plain decimal" in str(answer.json()["errors"]["max_cost"])
    assert not AgentRun.objects.exists()


def agent_form(name: str, max_cost: str) -> dict[str, str]:
    inline = {"TOTAL_FORMS": "0", "INITIAL_FORMS": "0", "MIN_NUM_FORMS": "0", "MAX_NUM_FORMS": "1000"}
    return {
        "name": name,
        "description": "",
        "definition": json.dumps({"max_cost": max_cost}),
        **{f"versions-{key}": value for key, value in inline.items()},
    }


def exits(argv: list[str]) -> int:
    """A command's exit code: 0, or the ``returncode`` of its ``CommandError`` (one line)."""
    try:
        call_command(*argv, stdout=StringIO(), stderr=StringIO())
    except CommandError as refused:
        assert "\n" not in str(refused), (argv, str(refused))
        return refused.returncode
    return 0


def admin_answered(answer: Any, saved: bool, text: str) -> bool:
    """The admin's answer to an amount: its redirect when saved, else its form again with the
    field's error; a NUL character in a form field is refused before any form reads it, by the
    edge guard's one-line 400 (``http.edge``)."""
    if saved:
        return answer.status_code == 302
    if answer.status_code == 400:
        return "\x00" in text and answer.content.decode() == NUL_DETAIL + "\n"
    return answer.status_code == 200


def refused_with_detail(answer: Any, status: int) -> bool:
    """``status``, and a 400 that says why in JSON (never a 5xx, never an HTML page)."""
    if answer.status_code != status:
        return False
    return status != 400 or bool(answer.json())


def test_fuzz_every_money_input(alice, django_user_model):
    """Every money input: a run's ``max_cost`` (the API, a thread's message, the playground,
    ``agent_run --max-cost``), an agent's ``max_cost`` (the API, the admin), a price (the admin,
    ``agent_prices set --input/--output``) and a budget's cost (the API, the admin,
    ``agent_budgets set --cost``). 2xx (or the admin's redirect) only for a plain decimal within
    bounds, else a clear 4xx with a JSON body (the admin: its form again; a command: exit 2 in
    one line); never a 5xx, never another kind of error."""
    api = APIClient()
    api.force_authenticate(alice)
    browser = Client()
    browser.force_login(alice)
    root = django_user_model.objects.create_superuser("op", "op@example.com", "pw")
    operator = Client()
    operator.force_login(root)
    staff_api = APIClient()
    staff_api.force_authenticate(root)
    agents = itertools.count()

    @FUZZ
    @example(text="1_000")
    @example(text=" 1 ")
    @example(text="\uff11")
    @example(text="0.5")
    @example(text="")
    @example(text="1\x00")
    @given(text=TEXT)
    def fuzz(text: str) -> None:
        admission.reset()
        # a run's cost limit
        good = accepted(text, parsing.cost_limit("1000000"))
        body = {"prompt": "p", "script": [{"content": "x"}], "max_cost": text}
        answer = api.post("/api/runs/", body, format="json")
        assert refused_with_detail(answer, 202 if good else 400), (text, answer.content)
        thread = api.post("/api/threads/", {}, format="json").json()["thread_id"]
        message = api.post(f"/api/threads/{thread}/messages/", body, format="json")
        assert refused_with_detail(message, 202 if good else 400), (text, message.content)
        form = browser.post("/playground/runs/", playground_form(text), headers={"Accept": "application/json"})
        # An empty cost limit is no limit: the playground's default.
        assert refused_with_detail(form, 202 if good or text == "" else 400), (text, form.content)
        run = ["agent_run", "p", "--script", '[{"content": "x"}]', f"--max-cost={text}"]
        assert exits(run) == (0 if good else 2), text
        # an agent's cost limit
        name = f"fuzz-{next(agents)}"
        agent = staff_api.post("/api/agents/", {"name": name, "definition": {"max_cost": text}}, format="json")
        assert refused_with_detail(agent, 201 if good else 400), (text, agent.content)
        added = operator.post("/admin/nrllm_agents/agent/add/", agent_form(f"{name}-admin", text))
        assert admin_answered(added, good, text), (text, added.status_code)
        # a price
        price_ok = accepted(text, parsing.PRICE)
        added = operator.post("/admin/nrllm_agents/price/add/", {**admin_price_form(text), "model": "fuzz"})
        assert admin_answered(added, price_ok, text), (text, added.status_code)
        Price.objects.filter(model="fuzz").delete()
        for flags in ([f"--input={text}", "--output=1"], ["--input=1", f"--output={text}"]):
            assert exits(["agent_prices", "set", "--provider=p", "--model=m", *flags]) == (0 if price_ok else 2), text
        # a budget's cost ceiling (with a runs ceiling beside it, an empty one is no cost ceiling)
        budget_ok = text == "" or accepted(text, budgets.BUDGET_COST)
        ceiling = {"scope": "everyone", "window": "day", "max_cost": text, "max_runs": 1}
        answer = staff_api.post("/api/budgets/", ceiling, format="json")
        assert answer.status_code in ((200, 201) if budget_ok else (400,)), (text, answer.content)
        assert budget_ok or answer.json(), text
        assert exits(["agent_budgets", "set", "--everyone", "--window=day", f"--cost={text}", "--runs=1"]) == (
            0 if budget_ok else 2
        ), text
        Budget.objects.all().delete()
        added = operator.post("/admin/nrllm_agents/budget/add/", budget_form(text))
        assert admin_answered(added, budget_ok, text), (text, added.status_code)
        Budget.objects.all().delete()

    fuzz()
