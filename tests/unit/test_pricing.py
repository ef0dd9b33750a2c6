"""A model call's cost: tokens × price per million, exactly, in decimals; carried by ``Usage``."""

from __future__ import annotations

from decimal import Decimal

from nrllm_agents.domain import Price, ToolLoop, Usage
from nrllm_agents.domain.providers import ScriptedProvider
from nrllm_agents.domain.steps import decimal_text
from nrllm_agents.presentation import describe

PRICE = Price(Decimal("0.15"), Decimal("0.6"), "EUR", "connection vendor")


def test_the_cost_is_exact_and_never_a_float():
    cost = PRICE.cost(Usage(123_457, 98_765))
    assert cost == Decimal("0.07777755")  # (123457 × 0.15 + 98765 × 0.6) / 10⁶ and isinstance(cost, Decimal)
    assert PRICE.cost(Usage(1, 0)) == Decimal("0.00000015")
    assert decimal_text(Decimal("1E-7")) == "0.0000001" and decimal_text(Decimal("2.500000")) == "2.5"
    assert decimal_text(Decimal("1E+2")) == "100"


def test_usage_adds_costs_and_keeps_them_through_its_dict_form():
    priced = PRICE.priced(Usage(10, 20))
    estimated = PRICE.priced(Usage(5, 0), estimated=True)
    total = Usage() + priced + estimated
    assert total == Usage(15, 20, Decimal("0.00001425"), True)
    assert Usage.from_dict(total.as_dict()) == total
    assert total.as_dict() == {
        "prompt_tokens": 15,
        "completion_tokens": 20,
        "total_tokens": 35,
        "cost": "0.00001425",
        "cost_estimated": True,
    }
    assert Usage(1, 2) + Usage(3, 4) == Usage(4, 6) and "cost" not in (Usage(1, 2) + Usage(3, 4)).as_dict()
    assert Usage.from_dict({"prompt_tokens": 1, "cost": "not a number"}).cost is None
    assert Usage.from_dict({"cost": "NaN", "cost_estimated": True}) == Usage()


def test_the_loop_records_each_calls_cost_and_price():
    steps = []
    provider = ScriptedProvider([{"content": "hi", "usage": {"prompt_tokens": 100, "completion_tokens": 10}}])
    result = ToolLoop(provider, {}, trace=steps.append, price=PRICE).start("p")
    llm = [s for s in steps if s.kind == "llm"][0].payload
    assert llm["usage"]["cost"] == "0.000021" and llm["price"] == {
        "input_per_million": "0.15",
        "output_per_million": "0.6",
        "currency": "EUR",
        "source": "connection vendor",
    }
    assert result.usage.cost == Decimal("0.000021")
    lines = dict(describe.lines("llm", llm))
    assert lines["cost"] == "0.000021 EUR at 0.15 in / 0.6 out per 1M tokens, connection vendor"
    unpriced = []
    ToolLoop(ScriptedProvider([{"content": "hi"}]), {}, trace=unpriced.append).start("p")
    assert "price" not in unpriced[-1].payload and "cost" not in dict(describe.lines("llm", unpriced[-1].payload))
