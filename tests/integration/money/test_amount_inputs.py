"""Issue 32 finding 7: money is a plain decimal on every surface.

Guards: ``max_cost: "1_000"`` was 1000, ``" 1 "`` was 1, ``agent_prices set --input 1_0``
stored 10 and a fullwidth ``１`` stored 1, because each surface handed the text to ``Decimal()``
(which takes underscores, spaces, exponents and any Unicode digit). Each surface now reads the
text through ``money.parsing``; a fuzz of each answers only 2xx or a clear 4xx (or exit 2).
"""

from __future__ import annotations

from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from nrllm_agents import admission
from nrllm_agents.models import AgentRun, Price
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


@pytest.mark.parametrize("loose", ["1_0", " 1 ", "\uff11", "1e1", "-1"])
def test_the_admin_refuses_a_loose_price(django_user_model, loose):
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("op", "op@example.com", "pw"))
    answer = client.post("/admin/nrllm_agents/price/add/", admin_price_form(loose))
    assert answer.status_code == 200 and "plain decimal" in answer.content.decode()
    assert not Price.objects.exists()
    assert client.post("/admin/nrllm_agents/price/add/", admin_price_form("2.5")).status_code == 302
    assert Price.objects.get().input_per_million == Decimal("2.5")


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


def test_fuzz_every_money_input(alice, django_user_model):
    """API, admin form, playground form and command: 2xx (or the admin's redirect) only for a
    plain decimal, else a clear 4xx (or exit 2); never a 5xx, never another kind of error."""
    api = APIClient()
    api.force_authenticate(alice)
    browser = Client()
    browser.force_login(alice)
    operator = Client()
    operator.force_login(django_user_model.objects.create_superuser("op", "op@example.com", "pw"))

    @FUZZ
    @given(text=TEXT)
    def fuzz(text: str) -> None:
        admission.reset()
        good = accepted(text, parsing.cost_limit("1000000"))
        body = {"prompt": "p", "script": [{"content": "x"}], "max_cost": text}
        answer = api.post("/api/runs/", body, format="json")
        assert answer.status_code == (202 if good else 400), (text, answer.content)
        form = browser.post("/playground/runs/", playground_form(text), headers={"Accept": "application/json"})
        # An empty cost limit is no limit: the playground's default.
        assert form.status_code == (202 if good or text == "" else 400), (text, form.content)
        price_ok = accepted(text, parsing.PRICE)
        added = operator.post("/admin/nrllm_agents/price/add/", {**admin_price_form(text), "model": "fuzz"})
        assert added.status_code == (302 if price_ok else 200), (text, added.status_code)
        Price.objects.filter(model="fuzz").delete()
        try:
            call_command(
                "agent_prices", "set", "--provider=p", "--model=m", f"--input={text}", "--output=1", stdout=StringIO()
            )
            assert price_ok, text
        except CommandError as refused:
            assert not price_ok and refused.returncode == 2 and "\n" not in str(refused), text

    fuzz()
