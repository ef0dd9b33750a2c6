"""Shared budgets with real ``rqworker`` processes: a reservation held by a SIGKILLed worker is
released by ``agent_reap``, and the budget is whole again.

``transaction=True``: the workers and the reaper are other processes on the test database.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from nrllm_agents.models import Budget, BudgetHold
from nrllm_agents.money import pricing
from tests.e2e.processes import wait_for
from tests.e2e.workers.test_liveness import (  # noqa: F401 (fixtures)
    agent_reap,
    horse_of,
    lease_expired,
    queue,
    start_workers,
    worker_env,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_sigkilled_worker_s_reservation_is_released_by_the_reaper(runtime, queue, start_workers, worker_env):
    pricing.set_price(
        model="scripted-demo", provider="scripted", input_per_million=Decimal(1000), output_per_million=Decimal(1000)
    )
    budget = Budget.objects.create(scope="everyone", window="total", max_cost=Decimal("1.00"))
    env = {**worker_env, "NRLLM_BUDGET_MAX_TOKENS": "500"}
    workers = start_workers(1, env=env)
    long_call = {"delay": 30, "content": "a long answer " * 20, "usage": {"prompt_tokens": 10, "completion_tokens": 10}}
    run_id = runtime.enqueue({"prompt": "p", "tools": [], "script": [long_call]})
    wait_for(lambda: BudgetHold.objects.filter(run_id=run_id).exists(), timeout=60, what="the call's reservation")
    budget.refresh_from_db()
    assert Decimal("0.5") < budget.reserved_cost < Decimal("0.6")  # its prompt's estimate and 500 tokens
    workers.kill(workers.index_of_horse(horse_of(env, run_id)))  # SIGKILL in the middle of the call
    wait_for(lambda: lease_expired(run_id), timeout=30, what="the dead worker's lease to expire")
    assert "1 budget reservations released" in agent_reap(worker_env)
    budget.refresh_from_db()
    assert (budget.reserved_cost, budget.spent_cost) == (0, 0) and not BudgetHold.objects.exists()
