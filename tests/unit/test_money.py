"""Money as the console shows it (``observability.money``): from the cost shapes of the prices
module, and nothing at all when they are absent."""

from __future__ import annotations

from nrllm_agents.vocabulary import money


def test_amounts_read_exactly_as_recorded():
    # A cost is tokens x price, kept as a decimal: shown whole, never rounded to "0.0000".
    assert money.text("0.0000125") == "0.0000125 USD"
    assert money.text("0.012345") == "0.012345 USD"
    assert money.text({"amount": "12.50", "currency": "USD"}) == "12.5 USD"
    assert money.text({"amount": "1234.5", "currency": "CHF"}) == "1234.5 CHF"
    assert money.text("0.5", estimated=True) == "~0.5 USD"


def test_no_amount_shows_nothing():
    for value in (None, "", "abc", "NaN", True, {"currency": "USD"}):
        assert money.text(value) is None
    assert money.run_cost({"usage": {}}) is None
    assert money.steps_cost([{"usage": {}}, None]) is None


def test_the_steps_add_up_and_an_estimate_says_so():
    # The loop records a priced call's cost in its usage (domain.steps.Usage.as_dict).
    assert money.steps_cost([{"usage": {"cost": "0.01"}}, {"usage": {"cost": "0.02"}}]) == "0.03 USD"
    estimated = [{"usage": {"cost": "0.01"}}, {"usage": {"cost": "0.02", "cost_estimated": True}}]
    assert money.steps_cost(estimated) == "~0.03 USD"
    assert money.run_cost({"cost": {"amount": "0.2", "currency": "USD"}}) == "0.2 USD"
