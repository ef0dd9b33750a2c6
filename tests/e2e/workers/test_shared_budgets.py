"""Shared budgets with real worker processes: a reservation held by a SIGKILLed ``rqworker`` is
released by ``agent_reap``, and the budget is whole again; many runs of one user racing for one
budget on two ``agent_worker`` processes spend at most the budget and one call's reservation.

``transaction=True``: the workers and the reaper are other processes on the test database.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import transaction

from nrllm_agents.models import ACTIVE, AgentRun, AgentRunEvent, Budget, BudgetHold, RunStatus
from nrllm_agents.money import pricing
from nrllm_agents.presentation.presenters import stream_finished
from tests.e2e.processes import Workers, wait_for
from tests.e2e.workers.test_liveness import (  # noqa: F401 (fixtures)
    agent_reap,
    horse_of,
    lease_expired,
    queue,
    start_workers,
    worker_env,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_sigkilled_worker_s_reservation_is_released_by_the_reaper(
    runtime, queue, start_workers, worker_env, settings
):
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "BUDGET_MAX_TOKENS": 500}  # as the workers: admission
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


CALC = {"name": "calculator", "arguments": {"expression": "1+1"}}


@pytest.mark.postgres_only
@pytest.mark.processes
def test_runs_racing_for_one_budget_on_two_agent_workers_spend_at_most_it_and_one_reservation(
    runtime, queue, worker_env, alice, tmp_path, settings
):
    """40 runs of one user, released at one commit to two agent_workers with a slot for each:
    calls of 0.01-0.05 (0.05 reserved) against 0.50, which stops most of them."""
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "BUDGET_MAX_TOKENS": 50}  # as the workers: admission
    pricing.set_price(
        model="scripted-demo", provider="scripted", input_per_million=Decimal(0), output_per_million=Decimal(1000)
    )
    budget = Budget.objects.create(scope="user", user=alice, window="day", max_cost=Decimal("0.50"))
    env = {**worker_env, "NRLLM_BUDGET_MAX_TOKENS": "50", "NRLLM_LEASE_SECONDS": "60"}  # no reaping under load

    def script(i: int) -> list[dict]:
        calls = [
            {
                "tool_calls": [CALC],
                "delay": 0.2,
                "usage": {"prompt_tokens": 0, "completion_tokens": 10 + (i + k) % 5 * 10},
            }
            for k in range(3)
        ]
        return [*calls, {"content": "done", "delay": 0.2, "usage": {"prompt_tokens": 0, "completion_tokens": 10}}]

    slots = ("--concurrency", "20")
    with Workers(env, count=2, log_dir=tmp_path / "workers", command="agent_worker", extra_args=slots):
        with transaction.atomic():  # every run is dispatched at the commit: all of them race at once
            ids = [
                runtime.enqueue({"prompt": "p", "tools": ["calculator"], "script": script(i)}, owner=alice)
                for i in range(40)
            ]
        # a cancelled run's worker records its step in flight and the ack after the status flips
        wait_for(
            lambda: all(stream_finished(run) for run in AgentRun.objects.filter(pk__in=ids)),
            timeout=120,
            interval=0.1,
            what="every run",
        )
    runs = list(AgentRun.objects.filter(pk__in=ids))
    assert not [run for run in runs if run.status in ACTIVE]
    recorded = sum(run.cost or Decimal(0) for run in runs)
    assert recorded <= budget.max_cost + Decimal("0.05")
    stopped = [run for run in runs if run.status != RunStatus.COMPLETED]
    assert len(stopped) >= 30  # 0.50 pays for a few runs of 4 calls, not 40
    for run in stopped:
        assert (run.status, run.termination_reason) == (RunStatus.CANCELLED, "budget_exhausted")
        assert "budget of user alice per day is exhausted" in run.cancel_reason
        ack = AgentRunEvent.objects.filter(run_id=run.pk).order_by("-sequence").first()
        assert ack.kind == "cancelled" and ack.payload["limit"]["budget"] == budget.pk
    budget.refresh_from_db()
    assert budget.reserved_cost == 0 and not BudgetHold.objects.exists()
    assert budget.spent_cost == recorded
