"""A model call's spend and its step are one fence, under real workers that take runs back from
each other (issue 44, item 14): a 1 s lease, model calls of 0.2, 1.5 and 3 s, and every worker's
own reaper running each second. A call that outlives its lease is taken back and made again
elsewhere while the first worker is still waiting on it; that worker's step is refused and so is
its charge. However the runs end, the budget's spend equals what their recorded model steps
hold: every token, and the cost to the cent.

``transaction=True``: the workers are other processes on the test database.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from nrllm_agents.models import AgentRun, AgentRunEvent, Budget, BudgetHold
from nrllm_agents.money import pricing
from nrllm_agents.presentation.presenters import stream_finished
from tests.e2e.processes import Workers, wait_for
from tests.e2e.workers.test_liveness import journal, queue, worker_env  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres_only, pytest.mark.processes]

CALC = {"name": "calculator", "arguments": {"expression": "1+1"}}
DELAYS = (0.2, 1.5, 3.0)  # shorter than the lease, about it, always past it


def script(i: int) -> list[dict]:
    first = {"tool_calls": [CALC], "delay": DELAYS[i % 3], "usage": {"prompt_tokens": 7, "completion_tokens": 10 + i}}
    return [first, {"content": "done", "delay": 0.1, "usage": {"prompt_tokens": 3, "completion_tokens": 5}}]


@pytest.mark.parametrize(
    ("command", "runs", "extra_args"),
    [("rqworker", 6, ()), ("agent_worker", 12, ("--concurrency", "12"))],
)
def test_a_budget_charges_exactly_what_the_runs_record_when_leases_are_taken_back(
    runtime, queue, worker_env, tmp_path, command, runs, extra_args
):
    pricing.set_price(
        model="scripted-demo", provider="scripted", input_per_million=Decimal(1000), output_per_million=Decimal(1000)
    )
    budget = Budget.objects.create(scope="everyone", window="total", max_cost=Decimal(1000))
    env = {
        **worker_env,
        "NRLLM_LEASE_SECONDS": "1",
        "NRLLM_MAINTENANCE_SECONDS": "1",
        "NRLLM_MAX_ATTEMPTS": "3",
        "NRLLM_BUDGET_MAX_TOKENS": "50",
    }
    with Workers(env, count=2, log_dir=tmp_path / "workers", command=command, extra_args=extra_args):
        ids = [runtime.enqueue({"prompt": "p", "tools": ["calculator"], "script": script(i)}) for i in range(runs)]
        wait_for(
            lambda: all(stream_finished(run) for run in AgentRun.objects.filter(pk__in=ids)),
            timeout=120,
            interval=0.2,
            what="every run",
        )
        wait_for(lambda: not BudgetHold.objects.exists(), timeout=30, what="every reservation to be given back")
    calls = [line for run_id in ids for line in journal(worker_env, run_id) if line.get("what") == "model"]
    steps = AgentRunEvent.objects.filter(run_id__in=ids, kind="llm")
    usages = [step.payload["usage"] for step in steps]
    assert len(calls) > len(usages)  # calls were taken back and made again: their first makers recorded nothing
    recorded_tokens = sum(u["prompt_tokens"] + u["completion_tokens"] for u in usages)
    recorded_cost = sum(Decimal(u["cost"]) for u in usages)
    budget.refresh_from_db()
    assert budget.spent_tokens == recorded_tokens
    cent = Decimal("0.01")
    assert budget.spent_cost.quantize(cent) == recorded_cost.quantize(cent)
    assert budget.spent_cost == recorded_cost
    assert budget.reserved_cost == 0 and budget.reserved_tokens == 0
