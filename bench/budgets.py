"""What shared budgets cost and how tight they hold (issue 37). No assertions; numbers only.

1. ``step``: the same zero-delay runs (calculator tool calls) with no budget and under three
   covering budgets (user, group, everyone), in alternating blocks; prints the time per step and
   the ratio (the reservation before each model call and its settlement after it).
2. ``overshoot``: ``--runs`` runs of one user, ``--concurrency`` at a time on threads of this
   process, against a 1.00 daily budget; each call costs 0.01 to 0.05. Prints the sum of the
   recorded costs, the overshoot past the budget (at most one call's reservation, by design), how
   many runs stopped ``budget_exhausted`` and whether any is left running.
3. ``inflight``: two runs of a group share a budget; the first one's costly call exhausts it
   while the second streams a long call. Prints the time from the second run's cancel (the
   exhaustion's commit) to its interrupted step's record, p50 and p99 over ``--rounds``.

PostgreSQL only; creates, migrates and drops its own database (``nrllm_bench_budgets``)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/budgets.py
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.step_overhead import production_settings, summary, throwaway_database  # noqa: E402

CALC = {"name": "calculator", "arguments": {"expression": "1+1"}}


def step_cost(blocks: int, steps: int) -> dict[str, Any]:
    from django.contrib.auth.models import Group, User

    from nrllm_agents.models import AgentRunEvent, Budget
    from nrllm_agents.runtime.agent_runtime import AgentRuntime

    runtime = AgentRuntime()
    user = User.objects.create_user("bench-step")
    team = Group.objects.create(name="bench-team")
    user.groups.add(team)
    script = [{"tool_calls": [CALC], "usage": {"prompt_tokens": 10, "completion_tokens": 5}}] * (steps // 3)
    script = [*script, {"content": "done"}]
    per_step: dict[str, list[float]] = {"none": [], "budgets": []}
    for block in range(blocks * 2):
        covered = (block % 2 == 1) if (block // 2) % 2 == 0 else (block % 2 == 0)  # ABBA
        Budget.objects.all().delete()
        if covered:
            Budget.objects.create(scope="user", user=user, window="day", max_cost=Decimal(10**6))
            Budget.objects.create(scope="group", group=team, window="month", max_tokens=10**12)
            Budget.objects.create(scope="everyone", window="total", max_cost=Decimal(10**6))
        started = time.perf_counter()
        result = runtime.run({"prompt": "p", "tools": ["calculator"], "script": script}, owner=user)
        elapsed = time.perf_counter() - started
        n = AgentRunEvent.objects.filter(run_id=result.run_id).count()
        per_step["budgets" if covered else "none"].append(elapsed / n)
    none, budgeted = summary(per_step["none"]), summary(per_step["budgets"])
    return {"none_ms": none, "budgets_ms": budgeted, "ratio_p50": budgeted["p50"] / none["p50"]}


def overshoot(runs: int, concurrency: int) -> dict[str, Any]:
    from django.contrib.auth.models import User
    from django.db import connections

    from nrllm_agents.admission.budgets import BudgetRefused
    from nrllm_agents.models import AgentRun, Budget, RunStatus
    from nrllm_agents.runtime.agent_runtime import AgentRuntime

    runtime = AgentRuntime()
    user = User.objects.create_user("bench-overshoot")
    budget = Budget.objects.create(scope="user", user=user, window="day", max_cost=Decimal("1.00"))
    refused = 0
    lock = threading.Lock()

    def one(i: int) -> None:
        nonlocal refused
        try:
            script = [
                {"tool_calls": [CALC], "usage": {"prompt_tokens": 0, "completion_tokens": 10 + (i + k) % 5 * 10}}
                for k in range(3)
            ] + [{"content": "done", "usage": {"prompt_tokens": 0, "completion_tokens": 10}}]
            runtime.run({"prompt": "p", "tools": ["calculator"], "script": script}, owner=user)
        except BudgetRefused:
            with lock:
                refused += 1
        finally:
            connections.close_all()

    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(runs)))
    budget.refresh_from_db()
    rows = AgentRun.objects.filter(owner=user)
    recorded = sum((r.cost or Decimal(0)) for r in rows)
    return {
        "runs": runs,
        "concurrency": concurrency,
        "budget": "1.00",
        "recorded_cost": str(recorded),
        "overshoot": str(max(recorded - Decimal("1.00"), Decimal(0))),
        "one_reservation": "0.05",
        "stopped_budget_exhausted": rows.filter(termination_reason="budget_exhausted").count(),
        "refused_at_admission": refused,
        "left_running": rows.filter(status__in=[RunStatus.RUNNING, RunStatus.QUEUED]).count(),
        "budget_spent": str(budget.spent_cost),
        "budget_reserved": str(budget.reserved_cost),
    }


def inflight(rounds: int) -> dict[str, Any]:
    from django.contrib.auth.models import Group, User
    from django.db import connections

    from nrllm_agents.models import AgentRun, AgentRunEvent, Budget, BudgetHold
    from nrllm_agents.runtime.agent_runtime import AgentRuntime

    runtime = AgentRuntime()
    team = Group.objects.create(name="bench-inflight")
    a, b = User.objects.create_user("bench-a"), User.objects.create_user("bench-b")
    team.user_set.add(a, b)
    samples = []
    for _ in range(rounds):
        Budget.objects.all().delete()
        Budget.objects.create(scope="group", group=team, window="day", max_cost=Decimal("1.00"))
        box: dict[str, Any] = {}

        def streaming() -> None:
            try:
                turn = {"delay": 20, "content": "streams " * 40, "usage": {"prompt_tokens": 0, "completion_tokens": 10}}
                box["b"] = runtime.run({"prompt": "p", "script": [turn]}, owner=b)
            finally:
                connections.close_all()

        thread = threading.Thread(target=streaming)
        thread.start()
        while not BudgetHold.objects.exists():
            time.sleep(0.005)
        time.sleep(0.2)
        runtime.run(
            {"prompt": "p", "script": [{"content": "x", "usage": {"prompt_tokens": 0, "completion_tokens": 1000}}]},
            owner=a,
        )
        thread.join(60)
        run = AgentRun.objects.get(pk=box["b"].run_id)
        step = AgentRunEvent.objects.get(run_id=run.pk, kind="llm")
        samples.append((step.created_at - run.cancel_requested_at).total_seconds())
    return {"rounds": rounds, "cancel_to_interrupted_step_ms": summary(samples)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--database", default="nrllm_bench_budgets")
    args = parser.parse_args()
    production_settings()
    os.environ["NRLLM_BUDGET_MAX_TOKENS"] = "50"  # a call's worst case: 50 tokens, 0.05 at the price below
    os.environ.setdefault("NRLLM_EXECUTOR", "local")
    with throwaway_database(args.database):
        from nrllm_agents.money import pricing

        pricing.set_price(
            model="scripted-demo", provider="scripted", input_per_million=Decimal(0), output_per_million=Decimal(1000)
        )
        print(json.dumps({"step": step_cost(args.blocks, args.steps)}))
        print(json.dumps({"overshoot": overshoot(args.runs, args.concurrency)}))
        print(json.dumps({"inflight": inflight(args.rounds)}))


if __name__ == "__main__":
    main()
