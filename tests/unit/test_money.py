"""Money as the console shows it (``observability.money``): from the cost shapes of the prices
module, and nothing at all when they are absent."""

from __future__ import annotations

from nrllm_agents.money import amounts


def test_amounts_read_exactly_as_recorded():
    # A cost is tokens x price, kept as a decimal: shown whole, never rounded to "0.0000".
    assert amounts.text("0.0000125") == "0.0000125 USD"
    assert amounts.text("0.012345") == "0.012345 USD"
    assert amounts.text({"amount": "12.50", "currency": "USD"}) == "12.5 USD"
    assert amounts.text({"amount": "1234.5", "currency": "CHF"}) == "1234.5 CHF"
    assert amounts.text("0.5", estimated=True) == "~0.5 USD"


def test_no_amount_shows_nothing():
    for value in (None, "", "abc", "NaN", True, {"currency": "USD"}):
        assert amounts.text(value) is None
    assert amounts.run_cost({"usage": {}}) is None
    assert amounts.steps_cost([{"usage": {}}, None]) is None


def test_the_steps_add_up_and_an_estimate_says_so():
    # The loop records a priced call's cost in its usage (domain.steps.Usage.as_dict).
    assert amounts.steps_cost([{"usage": {"cost": "0.01"}}, {"usage": {"cost": "0.02"}}]) == "0.03 USD"
    estimated = [{"usage": {"cost": "0.01"}}, {"usage": {"cost": "0.02", "cost_estimated": True}}]
    assert amounts.steps_cost(estimated) == "~0.03 USD"
    assert amounts.run_cost({"cost": {"amount": "0.2", "currency": "USD"}}) == "0.2 USD"
