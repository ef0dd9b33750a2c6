"""Prices and spend: each call costed at the price in force, exactly; a run stops at max_cost."""

from __future__ import annotations

import json
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import CaptureQueriesContext
from prometheus_client import REGISTRY

from nrllm_agents.catalog import connections
from nrllm_agents.models import AgentRun, AgentRunEvent, CancelSource, Price, RunStatus
from nrllm_agents.money import pricing
from nrllm_agents.presentation.outcomes import Outcome
from nrllm_agents.runtime.agent_runtime import AgentRuntime
from nrllm_agents.testing.chat_server import ChatCompletionServer
from nrllm_agents.validation.run_request import InvalidRequest, RunRequest

pytestmark = pytest.mark.django_db

IN, OUT = Decimal("2.5"), Decimal("10.123457")
CALC = {"name": "calculator", "arguments": {"expression": "1+1"}}


def turn(prompt: int, completion: int, **extra) -> dict:
    return {"usage": {"prompt_tokens": prompt, "completion_tokens": completion}, **extra}


def scripted_price(input_per_million: Decimal = IN, output_per_million: Decimal = OUT) -> Price:
    return pricing.set_price(
        model="scripted-demo",
        provider="scripted",
        input_per_million=input_per_million,
        output_per_million=output_per_million,
    )[0]


def llm_costs(run_id) -> list[str]:
    return [e.payload["usage"]["cost"] for e in AgentRunEvent.objects.filter(run_id=run_id, kind="llm")]


def test_a_runs_cost_is_its_recorded_tokens_at_the_prices_set_exactly(runtime, client, alice):
    scripted_price()
    script = [turn(1234, 567, tool_calls=[CALC]), turn(2001, 33, content="2")]
    result = runtime.run({"prompt": "p", "tools": ["calculator"], "script": script}, owner=alice)
    assert result.outcome == Outcome.COMPLETED
    run = AgentRun.objects.get(pk=result.run_id)
    tokens_in, tokens_out = run.prompt_tokens, run.completion_tokens
    assert (tokens_in, tokens_out) == (3235, 600)
    expected = (tokens_in * IN + tokens_out * OUT) / Decimal(1_000_000)
    assert run.cost == expected and isinstance(run.cost, Decimal)
    assert not run.cost_estimated
    # Each call carries its own cost and the price it was costed at, as decimal strings.
    assert [Decimal(c) for c in llm_costs(run.pk)] == [
        (1234 * IN + 567 * OUT) / 1_000_000,
        (2001 * IN + 33 * OUT) / 1_000_000,
    ]
    first = AgentRunEvent.objects.filter(run_id=run.pk, kind="llm").first()
    assert first.payload["price"] == {
        "input_per_million": "2.5",
        "output_per_million": "10.123457",
        "currency": "USD",
        "source": "provider scripted",
    }
    client.force_login(alice)
    body = client.get(f"/api/runs/{run.pk}/").json()
    assert body["cost"] == {"amount": str(expected.normalize()), "currency": "USD", "estimated": False}
    assert Decimal(body["cost"]["amount"]) == expected


def test_a_later_price_change_changes_no_past_run(runtime):
    price = scripted_price()
    script = [turn(1000, 1000, content="a")]
    before = runtime.run({"prompt": "p", "tools": [], "script": script})
    recorded = (AgentRun.objects.get(pk=before.run_id).cost, llm_costs(before.run_id))
    price.input_per_million, price.output_per_million = Decimal("100"), Decimal("200")
    price.save()
    assert (AgentRun.objects.get(pk=before.run_id).cost, llm_costs(before.run_id)) == recorded
    after = runtime.run({"prompt": "p", "tools": [], "script": script})
    assert AgentRun.objects.get(pk=after.run_id).cost == Decimal("0.3")  # the new price: (1000×100 + 1000×200) / 10⁶
    assert recorded[0] == (1000 * IN + 1000 * OUT) / 1_000_000


def test_a_run_without_a_price_has_no_cost():
    result = AgentRuntime().run({"prompt": "p", "tools": [], "script": [turn(10, 10, content="x")]})
    run = AgentRun.objects.get(pk=result.run_id)
    assert run.cost is None
    assert "cost" not in AgentRunEvent.objects.get(run_id=run.pk, kind="llm").payload["usage"]
    assert AgentRuntime().status(run.pk).cost is None


def test_the_cost_adds_up_across_an_approval_segment(runtime):
    scripted_price()
    note = {"name": "write_note", "arguments": {"title": "t", "body": "b"}}
    script = [turn(100, 10, tool_calls=[note]), turn(200, 20, content="done")]
    first = runtime.run({"prompt": "p", "tools": ["write_note"], "script": script})
    assert first.outcome == Outcome.AWAITING_APPROVAL
    waiting = AgentRun.objects.get(pk=first.run_id).cost
    assert waiting == (100 * IN + 10 * OUT) / 1_000_000
    assert runtime.approve(first.run_id, True).outcome == Outcome.COMPLETED
    assert AgentRun.objects.get(pk=first.run_id).cost == (300 * IN + 30 * OUT) / 1_000_000


def test_a_run_stops_at_max_cost_cancelled_by_the_system(runtime):
    scripted_price(Decimal("1000"), Decimal("1000"))  # 0.001 per token
    script = [turn(100, 100, tool_calls=[CALC])] * 5 + [turn(1, 1, content="never")]
    result = runtime.run(
        {"prompt": "p", "tools": ["calculator"], "script": script, "max_cost": "0.35", "max_iterations": 10}
    )
    assert result.outcome == Outcome.CANCELLED
    run = AgentRun.objects.get(pk=result.run_id)
    assert (run.status, run.termination_reason, run.cancel_source) == (
        RunStatus.CANCELLED,
        "cost_exceeded",
        CancelSource.SYSTEM,
    )
    assert run.max_cost == Decimal("0.35") and run.cost == Decimal("0.4")
    assert run.cancel_detail == {"limit": "max_cost", "value": "0.35", "measured": "0.4", "unit": "USD"}
    kinds = [e.kind for e in AgentRunEvent.objects.filter(run_id=run.pk)]
    # The second call took the cost to 0.4 > 0.35: it is recorded, nothing starts after it.
    assert kinds == ["request", "llm", "tool", "request", "llm", "cancelled"]
    cancelled = AgentRunEvent.objects.get(run_id=run.pk, kind="cancelled").payload
    assert cancelled["limit"]["limit"] == "max_cost"


# transaction=True: the cancel trips the call in flight from its on_commit hook, which runs only
# when the cancelling transaction really commits.
@pytest.mark.django_db(transaction=True)
def test_an_interrupted_calls_cost_uses_its_estimated_tokens_and_says_so(runtime):
    scripted_price(Decimal("1000"), Decimal("1000"))
    long = {"content": " ".join(["word"] * 40), "delay": 30, **turn(50, 400)}
    deltas = []

    def cancel_on_first_piece(delta):
        deltas.append(delta)
        if len(deltas) == 1:  # while the call is in flight: interrupted at once, in this process
            runtime.cancel(delta["run_id"], source=CancelSource.API, reason="enough")

    result = runtime.run({"prompt": "p", "tools": [], "script": [long]}, on_delta=cancel_on_first_piece)
    assert result.outcome == Outcome.CANCELLED
    llm = AgentRunEvent.objects.get(run_id=result.run_id, kind="llm").payload
    assert llm["interrupted"] is True and llm["usage_estimated"] is True
    usage = llm["usage"]
    assert usage["cost_estimated"] is True
    assert Decimal(usage["cost"]) == (usage["prompt_tokens"] + usage["completion_tokens"]) * Decimal("0.001")
    run = AgentRun.objects.get(pk=result.run_id)
    assert run.cost == Decimal(usage["cost"]) and run.cost_estimated
    assert pricing.cost_dict(run)["estimated"] is True
    assert "estimated" in pricing.cost_text(run)


def test_a_connections_price_wins_over_its_providers(runtime):
    with ChatCompletionServer([{"content": "hi", "usage": {"prompt_tokens": 10, "completion_tokens": 5}}]) as server:
        row, _ = connections.save("vendor", kind="openai", base_url=server.base_url, default_model="gpt-x")
        pricing.set_price(model="gpt-x", provider="openai", input_per_million=Decimal(1), output_per_million=Decimal(1))
        pricing.set_price(model="gpt-x", connection=row, input_per_million=Decimal(3), output_per_million=Decimal(7))
        result = runtime.run({"prompt": "p", "tools": [], "connection": "vendor"})
    assert result.outcome == Outcome.COMPLETED, result.error
    assert AgentRun.objects.get(pk=result.run_id).cost == Decimal("0.000065")  # (10×3 + 5×7) / 10⁶
    assert AgentRunEvent.objects.get(run_id=result.run_id, kind="llm").payload["price"]["source"] == "connection vendor"


def test_the_price_is_read_once_per_segment_not_per_step(runtime):
    scripted_price()
    script = [turn(1, 1, tool_calls=[CALC])] * 4 + [turn(1, 1, content="ok")]
    request = {"prompt": "p", "tools": ["calculator"], "script": script}
    with CaptureQueriesContext(connection) as captured:
        runtime.run(request)
    price_reads = [q for q in captured.captured_queries if "nrllm_agents_price" in q["sql"]]
    assert len(price_reads) == 1


def test_max_cost_is_validated_everywhere_like_the_other_limits():
    for bad in (0, -1, "abc", "1e400", True, [1], "0.0000000000001", "2000000"):
        with pytest.raises(InvalidRequest) as refused:
            RunRequest.from_mapping({"prompt": "p", "max_cost": bad})
        assert "max_cost" in refused.value.errors
    request = RunRequest.from_mapping({"prompt": "p", "max_cost": 0.5})
    assert request.max_cost == Decimal("0.5") and request.as_dict()["max_cost"] == "0.5"
    assert RunRequest.from_mapping(request.as_dict()) == request


def test_the_cli_sets_and_lists_prices_and_shows_a_runs_cost():
    out = StringIO()
    call_command(
        "agent_prices", "set", "--provider", "scripted", "--model", "scripted-demo", "--input", "2.5", "--output", "10",
        stdout=out,
    )  # fmt: skip
    assert "price set" in out.getvalue()
    listed = StringIO()
    call_command("agent_prices", "list", "--json", stdout=listed)
    assert json.loads(listed.getvalue()) == {
        "connection": None,
        "provider": "scripted",
        "model": "scripted-demo",
        "input_per_million": "2.5",
        "output_per_million": "10",
        "currency": "USD",
    }
    human = StringIO()
    call_command("agent_prices", "list", stdout=human)
    assert human.getvalue().strip() == "scripted-demo via provider scripted: 2.5 in / 10 out USD per 1M tokens"
    for args in (["--input", "x", "--output", "1"], ["--input", "-1", "--output", "1"]):
        with pytest.raises(CommandError) as bad:
            call_command("agent_prices", "set", "--provider", "scripted", "--model", "m", *args)
        assert bad.value.returncode == 2
    with pytest.raises(CommandError) as unknown:
        call_command("agent_prices", "set", "--connection", "nope", "--model", "m", "--input", "1", "--output", "1")
    assert unknown.value.returncode == 2
    assert Price.objects.count() == 1

    ran = StringIO()
    with pytest.raises(SystemExit) as cancelled:
        call_command(
            "agent_run", "p", "--tool", "calculator", "--max-cost", "0.000001", "--json",
            "--script", json.dumps([turn(1, 1, tool_calls=[CALC]), turn(1, 1, content="x")]),
            stdout=ran, stderr=StringIO(),
        )  # fmt: skip
    assert cancelled.value.code == 3
    final = json.loads(ran.getvalue().splitlines()[-1])
    assert final["cost"] == {"amount": "0.0000125", "currency": "USD", "estimated": False}
    assert final["termination_reason"] == "cost_exceeded" and final["limits"]["max_cost"] == "0.000001"
    human = StringIO()
    call_command("agent_events", final["run_id"], stdout=human)
    assert "0.0000125 USD" in human.getvalue()


def test_spend_is_counted_by_provider_and_model():
    labels = {"provider": "scripted", "model": "scripted-demo", "currency": "USD"}
    before = REGISTRY.get_sample_value("nrllm_spend_total", labels) or 0.0
    scripted_price(Decimal("1000"), Decimal("0"))
    AgentRuntime().run({"prompt": "p", "tools": [], "script": [turn(500, 7, content="x")]})
    assert REGISTRY.get_sample_value("nrllm_spend_total", labels) == pytest.approx(before + 0.5)


def test_the_playground_and_the_api_take_max_cost_a_connection_and_an_agent(client, alice):
    from nrllm_agents.catalog import agents
    from nrllm_agents.web.forms import RunForm

    connections.save("vendor", kind="openai", base_url="http://127.0.0.1:9/v1", default_model="gpt-x")
    agents.save("adder", {"system": "Add.", "provider": "scripted", "tools": ["calculator"]})
    base = {"prompt": "p", "provider": "scripted", "model": "", "max_iterations": "5", "mode": "queued", "script": ""}
    through = RunForm({**base, "connection": "vendor", "max_cost": "0.25"})
    assert through.is_valid(), through.errors
    assert (through.run_request.connection, through.run_request.model) == ("vendor", "gpt-x")
    assert through.run_request.max_cost == Decimal("0.25")
    from_agent = RunForm({**base, "agent": "adder"})
    assert from_agent.is_valid(), from_agent.errors
    assert from_agent.run_request.tools == ("calculator",) and from_agent.run_request.agent_version == 1
    bad = RunForm({**base, "max_cost": "-1"})
    assert not bad.is_valid() and "max_cost" in bad.errors

    client.force_login(alice)
    refused = client.post("/api/runs/", {"prompt": "p", "max_cost": "abc"}, content_type="application/json")
    assert refused.status_code == 400 and "max_cost" in refused.json()
    scripted_price()
    ran = client.post(
        "/api/runs/",
        {"prompt": "p", "agent": "adder", "max_cost": "5", "mode": "sync", "script": [turn(4, 2, content="6")]},
        content_type="application/json",
    )
    assert ran.status_code == 201, ran.json()
    body = ran.json()
    assert body["limits"]["max_cost"] == "5" and body["agent"] == {"name": "adder", "version": 1}
    amount = (4 * IN + 2 * OUT) / 1_000_000
    assert Decimal(body["cost"]["amount"]) == amount
    page = client.get(f"/playground/runs/{body['run_id']}/").content.decode()
    assert f"{amount.normalize():f} USD" in page and "adder v1" in page


def test_the_admin_shows_a_runs_cost(admin_client):
    scripted_price()
    result = AgentRuntime().run({"prompt": "p", "tools": [], "script": [turn(4, 2, content="6")]})
    amount = f"{((4 * IN + 2 * OUT) / 1_000_000).normalize():f} USD"
    assert amount in admin_client.get("/admin/nrllm_agents/agentrun/").content.decode()
    assert amount in admin_client.get(f"/admin/nrllm_agents/agentrun/{result.run_id}/change/").content.decode()


def test_the_admin_sets_a_price_for_a_connection_or_a_provider_not_both(admin_client):
    row, _ = connections.save("vendor", kind="openai", base_url="http://127.0.0.1:9/v1")
    form = {"model": "m", "input_per_million": "1.5", "output_per_million": "2"}
    both = admin_client.post("/admin/nrllm_agents/price/add/", {**form, "connection": row.pk, "provider": "openai"})
    assert both.status_code == 200 and "set exactly one of them" in both.content.decode()
    assert not Price.objects.exists()
    done = admin_client.post("/admin/nrllm_agents/price/add/", {**form, "connection": row.pk, "provider": ""})
    assert done.status_code == 302
    assert pricing.resolve("openai", "m", "vendor").input_per_million == Decimal("1.5")
