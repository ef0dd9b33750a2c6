"""Money as the console shows it (``observability.money``): from the cost shapes of the prices
module, and nothing at all when they are absent."""

from __future__ import annotations

from nrllm_agents.observability import money


def test_amounts_read_as_money():
    assert money.text("0.012345") == "$0.0123"
    assert money.text({"amount": "12.5", "currency": "USD"}) == "$12.50"
    assert money.text({"amount": "1234.5", "currency": "CHF"}) == "1,234.50 CHF"
    assert money.text("0.5", estimated=True) == "~$0.5000"


def test_no_amount_shows_nothing():
    for value in (None, "", "abc", "NaN", True, {"currency": "USD"}):
        assert money.text(value) is None
    assert money.run_cost({"usage": {}}) is None
    assert money.steps_cost([{"usage": {}}, None]) is None


def test_the_steps_add_up_and_an_estimate_says_so():
    assert money.steps_cost([{"cost": "0.01"}, {"cost": "0.02"}]) == "$0.0300"
    assert money.steps_cost([{"cost": "0.01"}, {"cost": "0.02", "estimated": True}]) == "~$0.0300"
    assert money.run_cost({"cost": {"amount": "0.2", "currency": "USD"}}) == "$0.2000"
