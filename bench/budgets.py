"""What shared budgets cost and how tight they hold (issue 37). No assertions; numbers only.

1. ``step``: the same zero-delay runs (calculator tool calls) with no budget and under three
   covering budgets (user, group, everyone), in alternating blocks, in this process; prints the
   time per step and the ratio (the reservation before each model call and its settlement after it).
2. ``overshoot``: ``--runs`` runs of one user against a 1.00 daily budget, queued by
   ``--enqueuers`` threads through ``nrllm_agents.enqueue`` (as API calls would), then executed by
   ``--workers`` real ``agent_worker`` processes started once all are queued (``--concurrency``
   slots each: every run at once by default); each model call costs 0.01 to 0.05 and takes
   ``--call-delay`` seconds.
   Prints the sum of the recorded costs, the overshoot past the budget (at most one call's
   reservation, by design), how many runs stopped ``budget_exhausted`` (each naming the budget),
   how many were refused at admission, whether any is left running, the budget after, and the
   peak of runs executing at once.
3. ``inflight``: two runs of a group share a budget, executed by the same workers; the first
   one's costly call exhausts it while the second streams a long call. Prints the time from the
   second run's cancel (the exhaustion's commit, by the first run's worker) to its interrupted
   step's record (by the second run's), p50 and p99 over ``--rounds``, and in how many rounds the
   two runs were in different processes.

4. ``provider`` (issue 44): ``--provider-runs`` runs at once share an everyone budget of
   ``--ceiling``, through an OpenAI-kind connection to the loopback chat-completions server
   (``nrllm_agents.testing.chat_server``, in this process), executed by the same workers. Each run
   makes four model calls, each answering 20,000 tokens; an honest server stops at the request's
   ``max_tokens`` (the bound the call reserved), a dishonest one (``--dishonest``) reports 9M
   tokens whatever it was sent; ``--stagger`` starts each run that many seconds after the call of
   the one before it started (the calls in flight then end apart). Prints the ceiling,
   what the budget spent, the overshoot, one call's reservation and the largest excess of one
   call over it, the bound each request carried, and how the runs ended.

PostgreSQL (``DATABASE_URL`` names the server; the benchmark creates, migrates and drops its own
database, ``nrllm_bench_budgets``) and Redis (``--redis-url``, flushed: use a db of its own).
``--only provider`` (or ``step``, ``overshoot``, ``inflight``, comma-separated) runs some::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/budgets.py \
        --redis-url redis://127.0.0.1:6379/12
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.step_overhead import production_settings, summary, throwaway_database  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Callable

    from django.db.models import QuerySet

    from nrllm_agents.models import AgentRun

CALC = {"name": "calculator", "arguments": {"expression": "1+1"}}
MAX_TOKENS = 50  # a call's worst case reserved: 50 tokens, 0.05 at the price set in main()


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
        request = {"prompt": "p", "tools": ["calculator"], "script": script, "max_iterations": len(script)}
        result = runtime.run(request, owner=user)
        elapsed = time.perf_counter() - started
        n = AgentRunEvent.objects.filter(run_id=result.run_id).count()
        per_step["budgets" if covered else "none"].append(elapsed / n)
    none, budgeted = summary(per_step["none"]), summary(per_step["budgets"])
    return {"none_ms": none, "budgets_ms": budgeted, "ratio_p50": budgeted["p50"] / none["p50"]}


class PeakRunning:
    """Samples, on a thread of its own, how many of a user's runs are executing at once."""

    def __init__(self, owner: Any) -> None:
        self.owner, self.peak, self._stop = owner, 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        from django.db import connections

        from nrllm_agents.models import AgentRun, RunStatus

        try:
            while not self._stop.wait(0.02):
                running = AgentRun.objects.filter(owner=self.owner, status=RunStatus.RUNNING).count()
                self.peak = max(self.peak, running)
        finally:
            connections.close_all()

    def __enter__(self) -> PeakRunning:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def unsettled(runs: QuerySet[AgentRun]) -> QuerySet[AgentRun]:
    """Runs still executing: active, or cancelled with the stop not yet recorded by their worker."""
    from django.db.models import Q

    from nrllm_agents.models import ACTIVE, RunStatus

    return runs.filter(Q(status__in=ACTIVE) | Q(status=RunStatus.CANCELLED, stopped_at=None))


def overshoot(runs: int, enqueuers: int, call_delay: float, start_workers: Callable[[], Any]) -> dict[str, Any]:
    """Enqueue every run, then start the workers: they find all of them queued at once."""
    from django.contrib.auth.models import User
    from django.db import connections
    from django.db.models import Max, Min

    import nrllm_agents
    from nrllm_agents.admission.budgets import BudgetRefused
    from nrllm_agents.models import AgentRun, AgentRunEvent, Budget

    user = User.objects.create_user("bench-overshoot")
    budget = Budget.objects.create(scope="user", user=user, window="day", max_cost=Decimal("1.00"))
    refused = 0
    lock = threading.Lock()

    def one(i: int) -> None:
        nonlocal refused
        script = [
            {
                "tool_calls": [CALC],
                "delay": call_delay,
                "usage": {"prompt_tokens": 0, "completion_tokens": 10 + (i + k) % 5 * 10},
            }
            for k in range(3)
        ] + [{"content": "done", "delay": call_delay, "usage": {"prompt_tokens": 0, "completion_tokens": 10}}]
        try:
            nrllm_agents.enqueue("p", owner=user, tools=["calculator"], script=script)
        except BudgetRefused:
            with lock:
                refused += 1
        finally:
            connections.close_all()

    rows = AgentRun.objects.filter(owner=user)
    started = time.monotonic()
    with ThreadPoolExecutor(enqueuers) as pool:
        list(pool.map(one, range(runs)))
    enqueued_s = time.monotonic() - started
    with PeakRunning(user) as peak:
        start_workers()
        started = time.monotonic()
        deadline = started + 600
        while unsettled(rows).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        settled_s = time.monotonic() - started
    budget.refresh_from_db()
    recorded = sum((r.cost or Decimal(0)) for r in rows)
    stopped = rows.filter(termination_reason="budget_exhausted")
    naming = AgentRunEvent.objects.filter(
        run__in=stopped,
        kind="cancelled",
        payload__termination_reason="budget_exhausted",
        payload__limit__budget=budget.pk,
    )
    claims = rows.exclude(started_at=None).aggregate(first=Min("started_at"), last=Max("started_at"))
    return {
        "runs": runs,
        "peak_running": peak.peak,
        "claimed_within_s": round((claims["last"] - claims["first"]).total_seconds(), 2),
        "enqueued_s": round(enqueued_s, 2),
        "settled_s": round(settled_s, 2),
        "budget": "1.00",
        "recorded_cost": str(recorded.normalize()),
        "overshoot": str(max(recorded - Decimal("1.00"), Decimal(0)).normalize()),
        "one_reservation": "0.05",
        "completed": rows.filter(status="completed").count(),
        "stopped_budget_exhausted": stopped.count(),
        "stopped_naming_the_budget": naming.values("run_id").distinct().count(),
        "refused_at_admission": refused,
        "other_endings": rows.exclude(status="completed").exclude(termination_reason="budget_exhausted").count(),
        "left_running": unsettled(rows).count(),
        "budget_spent": str(budget.spent_cost.normalize()),
        "budget_reserved": str(budget.reserved_cost.normalize()),
    }


def inflight(rounds: int, journal: Path) -> dict[str, Any]:
    """``journal``: the workers' call journal, which says the pid that made each run's model call."""
    from django.contrib.auth.models import Group, User

    import nrllm_agents
    from nrllm_agents.models import AgentRun, AgentRunEvent, Budget, BudgetHold
    from tests.e2e.processes import wait_for

    team = Group.objects.create(name="bench-inflight")
    a, b = User.objects.create_user("bench-a"), User.objects.create_user("bench-b")
    team.user_set.add(a, b)
    samples, endings, apart = [], set(), 0
    for _ in range(rounds):
        Budget.objects.all().delete()
        Budget.objects.create(scope="group", group=team, window="day", max_cost=Decimal("1.00"))
        turn = {"delay": 20, "content": "streams " * 40, "usage": {"prompt_tokens": 0, "completion_tokens": 10}}
        second = nrllm_agents.enqueue("p", owner=b, script=[turn])
        wait_for(lambda: BudgetHold.objects.filter(run_id=second).exists(), timeout=60, what="the streaming call")
        time.sleep(0.2)  # well into the stream
        costly = {"content": "x", "usage": {"prompt_tokens": 0, "completion_tokens": 1000}}
        first = nrllm_agents.enqueue("p", owner=a, script=[costly])
        both = AgentRun.objects.filter(pk__in=[first, second])
        wait_for(lambda: not unsettled(both).exists(), timeout=60, what="both runs")
        run = AgentRun.objects.get(pk=second)
        pids = {e["run_id"]: e["pid"] for e in map(json.loads, journal.read_text().splitlines()) if "run_id" in e}
        apart += pids[str(first)] != pids[str(second)]
        endings.add(f"{run.status}/{run.termination_reason}")
        step = AgentRunEvent.objects.get(run_id=run.pk, kind="llm")
        samples.append((step.created_at - run.cancel_requested_at).total_seconds())
    return {
        "rounds": rounds,
        "rounds_across_processes": apart,
        "second_run_endings": sorted(endings),
        "cancel_to_interrupted_step_ms": summary(samples),
    }


PROVIDER_PRICE = Decimal(1050)  # per million tokens, in and out: 20,000 answer tokens cost 21


def provider_overshoot(
    runs: int, ceiling: Decimal, dishonest: bool, call_delay: float, stagger: float = 0.0
) -> dict[str, Any]:
    """``runs`` runs under an everyone budget of ``ceiling``, through a connection to a loopback
    server answering 20,000 tokens (9M when ``dishonest``) to each of four calls: all at once, or
    one every ``stagger`` seconds."""
    from django.contrib.auth.models import User
    from django.db import connections, transaction

    import nrllm_agents
    from nrllm_agents.admission.budgets import BudgetRefused
    from nrllm_agents.models import AgentRun, AgentRunEvent, Budget, BudgetHold, Connection
    from nrllm_agents.money import pricing
    from nrllm_agents.runtime.worst_case import worst_case
    from nrllm_agents.testing.chat_server import ChatCompletionServer
    from tests.e2e.processes import wait_for

    answer = 9_000_000 if dishonest else 20_000
    turn = {"delay": call_delay, "usage": {"prompt_tokens": 30, "completion_tokens": answer}}
    script = [{**turn, "tool_calls": [CALC]}] * 3 + [{**turn, "content": "done"}]
    server = ChatCompletionServer(script, by_turn=True, **({"honours_max_tokens": False} if dishonest else {}))
    with server:
        Budget.objects.all().delete()
        name = "bench-dishonest" if dishonest else "bench-honest"
        connection = Connection.objects.create(name=name, kind="openai", base_url=server.base_url, default_model="m")
        pricing.set_price(
            connection=connection, model="m", input_per_million=PROVIDER_PRICE, output_per_million=PROVIDER_PRICE
        )
        budget = Budget.objects.create(scope="everyone", window="total", max_cost=ceiling)
        user = User.objects.create_user(f"bench-{name}")
        refused = 0
        ids = []
        at_once = transaction.atomic() if not stagger else contextlib.nullcontext()  # dispatched at the commit
        with at_once:
            for _ in range(runs):
                try:
                    ids.append(nrllm_agents.enqueue("p", owner=user, tools=["calculator"], connection=name, model="m"))
                except BudgetRefused:
                    refused += 1
                    continue
                if stagger:  # this run's call has started (it holds a reservation) or it stopped
                    started = AgentRun.objects.filter(pk=ids[-1])
                    wait_for(
                        lambda: BudgetHold.objects.filter(run_id=ids[-1]).exists() or not unsettled(started).exists(),
                        timeout=60,
                        interval=0.02,
                        what="the run's first call",
                    )
                    time.sleep(stagger)
        rows = AgentRun.objects.filter(pk__in=ids)
        wait_for(lambda: not unsettled(rows).exists(), timeout=600, interval=0.1, what="every run")
        wait_for(lambda: not BudgetHold.objects.exists(), timeout=60, what="every reservation")
        connections.close_all()
    budget.refresh_from_db()
    price = pricing.resolve("openai", "m", name)
    reservation, _ = worst_case([{"role": "user", "content": "p"}], int(os.environ["NRLLM_BUDGET_MAX_TOKENS"]), price)
    steps = list(AgentRunEvent.objects.filter(run__in=rows, kind="llm"))
    costs = [Decimal(e.payload["usage"]["cost"]) for e in steps if (e.payload.get("usage") or {}).get("cost")]
    bounds = {body.get("max_tokens") for body in server.requests if isinstance(body, dict)}
    spent = Decimal(budget.spent_cost)
    over = max(spent - ceiling, Decimal(0))
    excess = max((c - reservation for c in costs), default=Decimal(0)).max(Decimal(0))
    cents = Decimal("0.01")
    return {
        "dishonest": dishonest,
        "runs": runs,
        "stagger_s": stagger,
        "answer_tokens": answer,
        "bounds_sent": sorted(b for b in bounds if b is not None) or None,
        "ceiling": str(ceiling),
        "spent": str(spent.quantize(cents)),
        "overshoot": str(over.quantize(cents)),
        "calls_made": len(server.requests),
        "calls_charged": len(costs),
        "calls_interrupted": sum(1 for e in steps if e.payload.get("interrupted")),
        "one_reservation": str(reservation.quantize(cents)),
        "largest_excess_of_one_call": str(excess.quantize(cents)),
        "overshoot_in_excesses_of_one_call": round(float(over / excess), 2) if excess else None,
        "recorded_equals_spent": sum(costs) == spent,
        "refused_at_admission": refused,
        "endings": sorted({f"{r.status}/{r.termination_reason}" for r in rows}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--enqueuers", type=int, default=16, help="threads enqueueing the runs")
    parser.add_argument("--call-delay", type=float, default=0.3, help="seconds each scripted model call takes")
    parser.add_argument("--workers", type=int, default=2, help="agent_worker processes")
    parser.add_argument("--concurrency", type=int, default=0, help="slots per worker (0: runs / workers)")
    parser.add_argument("--pool-max", type=int, default=20, help="NRLLM_DB_POOL_MAX of each worker process")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--provider-runs", type=int, default=12, help="runs sharing the budget (provider)")
    parser.add_argument("--ceiling", default="50", help="the everyone budget's cost ceiling (provider)")
    parser.add_argument("--dishonest", action="store_true", help="the server reports 9M tokens (provider)")
    parser.add_argument("--provider-delay", type=float, default=0.5, help="seconds each answer takes (provider)")
    parser.add_argument("--stagger", type=float, default=0.0, help="seconds between two runs' starts (provider)")
    parser.add_argument("--only", default="step,overshoot,inflight,provider", help="the measures to run")
    parser.add_argument("--database", default="nrllm_bench_budgets")
    parser.add_argument("--redis-url", default=os.environ.get("NRLLM_BENCH_REDIS_URL", "redis://127.0.0.1:6379/12"))
    args = parser.parse_args()

    import redis

    production_settings()
    os.environ["REDIS_URL"] = args.redis_url  # this process enqueues there (executor "auto": RQ)
    os.environ["NRLLM_BUDGET_MAX_TOKENS"] = str(MAX_TOKENS)
    os.environ["NRLLM_DB_POOL_MAX"] = "0"  # this process's own connections: one per thread, no pool
    redis.Redis.from_url(args.redis_url).flushdb()
    with (
        tempfile.TemporaryDirectory(prefix="nrllm-budgets-bench-") as workdir,
        throwaway_database(args.database) as url,
    ):
        from nrllm_agents.money import pricing
        from tests.e2e.processes import Workers

        pricing.set_price(
            model="scripted-demo", provider="scripted", input_per_million=Decimal(0), output_per_million=Decimal(1000)
        )
        measures = set(args.only.split(","))
        if "step" in measures:
            print(json.dumps({"step": step_cost(args.blocks, args.steps)}), flush=True)
        journal = Path(workdir) / "journal.jsonl"
        env = dict(os.environ)
        env.update(
            {
                "DATABASE_URL": url,
                "NRLLM_CALL_JOURNAL": str(journal),
                "PYTHONPATH": str(ROOT),
                "NRLLM_LEASE_SECONDS": "60",  # a loaded machine must not make the workers reap each other
                "NRLLM_DB_POOL_MAX": str(args.pool_max),
            }
        )
        if measures & {"overshoot", "inflight"}:
            concurrency = args.concurrency or -(-args.runs // args.workers)
            slots = ("--concurrency", str(concurrency))
            workers = Workers(env, count=args.workers, log_dir=workdir, command="agent_worker", extra_args=slots)
            try:
                result = overshoot(args.runs, args.enqueuers, args.call_delay, workers.start)
                print(
                    json.dumps({"overshoot": {"workers": args.workers, "concurrency": concurrency, **result}}),
                    flush=True,
                )
                if "inflight" in measures:
                    print(json.dumps({"inflight": inflight(args.rounds, journal)}), flush=True)
            finally:
                workers.stop()
        if "provider" in measures:
            # a call's bound as deployed (the default): what each request carries and each call reserves
            os.environ["NRLLM_BUDGET_MAX_TOKENS"] = env["NRLLM_BUDGET_MAX_TOKENS"] = "4096"
            slots = ("--concurrency", str(-(-args.provider_runs // args.workers)))
            workers = Workers(env, count=args.workers, log_dir=workdir, command="agent_worker", extra_args=slots)
            with workers.start():
                ceiling = Decimal(args.ceiling)
                result = provider_overshoot(
                    args.provider_runs, ceiling, args.dishonest, args.provider_delay, args.stagger
                )
                print(json.dumps({"provider": result}), flush=True)


if __name__ == "__main__":
    main()
