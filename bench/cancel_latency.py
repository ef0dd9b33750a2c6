"""How long a cancelled queued run takes to stop, measured across real worker processes.

Enqueues K runs over W real ``manage.py rqworker`` processes. Every run is a script of
rounds whose model turn takes ``d`` seconds and whose tool (``sleep``) takes ``d`` seconds,
so every step in flight lasts about ``d``. From another process (which runs the
``agent_cancel`` command), cancels are issued at random moments while runs execute; the
others complete. It prints the distribution of ``stopped_at − cancel_requested_at`` (p50, p99,
max) in milliseconds and in units of ``d``, and, from the call journal the workers write, the
model calls and tools started after each cancel was requested and after each stop boundary.
Expected: max ≤ d plus a few ms; nothing started after a boundary. No assertions.

PostgreSQL (``DATABASE_URL`` names the server; the benchmark creates, migrates and drops its own
database) and Redis (``--redis-url``, flushed before and after: use a db of its own)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/cancel_latency.py
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from step_overhead import throwaway_database  # noqa: E402  (bench/ is this script's directory)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def script(rounds: int, d: float) -> list[dict[str, Any]]:
    turn = {"delay": d, "tool_calls": [{"name": "sleep", "arguments": {"seconds": d}}]}
    return [turn] * rounds + [{"delay": d, "content": "done"}]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40, help="K: runs to enqueue")
    parser.add_argument("--workers", type=int, default=3, help="W: rqworker processes")
    parser.add_argument("--delay", type=float, default=0.1, help="d: seconds per model turn and per tool")
    parser.add_argument("--rounds", type=int, default=6, help="tool rounds per run")
    parser.add_argument("--cancel-fraction", type=float, default=0.7, help="share of runs to cancel")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--database", default="nrllm_bench_cancel", help="throwaway database to create and drop")
    parser.add_argument("--redis-url", default=os.environ.get("NRLLM_BENCH_REDIS_URL", "redis://127.0.0.1:6379/12"))
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)

    import redis

    os.environ["REDIS_URL"] = args.redis_url  # read by settings: this process enqueues there
    redis.Redis.from_url(args.redis_url).flushdb()
    with tempfile.TemporaryDirectory(prefix="nrllm-cancel-bench-") as workdir:
        measure(args, rng, seed, Path(workdir))
    redis.Redis.from_url(args.redis_url).flushdb()


def measure(args: argparse.Namespace, rng: random.Random, seed: int, workdir: Path) -> None:
    """Run the load on a throwaway database and print the distribution."""
    d = args.delay
    journal_path = workdir / "journal.jsonl"
    with throwaway_database(args.database) as url:
        from tests.e2e.workers import Canceller, Workers, wait_for

        from nrllm_agents.models import TERMINAL, AgentRun, AgentRunEvent, RunStatus
        from nrllm_agents.presenters import stream_finished
        from nrllm_agents.runtime import AgentRuntime

        env = {k: v for k, v in os.environ.items() if k != "NRLLM_CALL_JOURNAL"}
        env.update({"DATABASE_URL": url, "REDIS_URL": args.redis_url, "NRLLM_CALL_JOURNAL": str(journal_path),
                    "DJANGO_SETTINGS_MODULE": "config.settings", "PYTHONPATH": str(ROOT)})
        workers = Workers(env, count=args.workers, log_dir=workdir)
        canceller = Canceller(env)
        try:
            workers.start()
            canceller.start()
            runtime = AgentRuntime()
            request = {"prompt": "bench", "tools": ["sleep"], "script": script(args.rounds, d),
                       "max_iterations": args.rounds + 1}
            run_ids = [str(runtime.enqueue(request)) for _ in range(args.runs)]
            targets = set(rng.sample(run_ids, round(args.runs * args.cancel_fraction)))
            # A target is cancelled on some tick while it runs, each tick with the same chance,
            # so the cancel lands at a random point of the run (often mid-step).
            run_seconds = (2 * args.rounds + 1) * d
            chance = min(1.0, 2 * (d / 4) / run_seconds)
            while targets:
                time.sleep(rng.uniform(0, d / 2))
                statuses = dict(AgentRun.objects.filter(pk__in=targets).values_list("pk", "status"))
                for pk, status in statuses.items():
                    if status in TERMINAL:
                        targets.discard(str(pk))
                    elif status == RunStatus.RUNNING and rng.random() < chance:
                        canceller.cancel(str(pk))
                        targets.discard(str(pk))
            wait_for(lambda: all(stream_finished(r) for r in AgentRun.objects.filter(pk__in=run_ids)),
                     timeout=300, interval=0.2, what="every run to finish")
        finally:
            canceller.stop()
            workers.stop()

        journal: dict[str, list[dict[str, Any]]] = {}
        if journal_path.exists():
            for line in journal_path.read_text().splitlines():
                entry = json.loads(line)
                journal.setdefault(entry.get("run_id"), []).append(entry)
        latencies, after_request, after_boundary, queued_hits, completed = [], [], [], 0, 0
        for run in AgentRun.objects.filter(pk__in=run_ids):
            if run.status == RunStatus.COMPLETED:
                completed += 1
                continue
            if run.status != RunStatus.CANCELLED:
                print(f"  unexpected: run {run.pk} ended {run.status} ({run.error_class})")
                continue
            steps = list(AgentRunEvent.objects.filter(run_id=run.pk).exclude(kind="cancelled").order_by("sequence"))
            if not steps:
                queued_hits += 1  # cancelled before a worker claimed it: it never ran
                continue
            requested = run.cancel_requested_at.timestamp()
            boundary = steps[-1].created_at.timestamp()
            starts = journal.get(str(run.pk), [])
            latencies.append((run.stopped_at - run.cancel_requested_at).total_seconds())
            after_request.append(sum(s["t"] > requested for s in starts))
            after_boundary.append(sum(s["t"] > boundary for s in starts))

        print(f"cancel_latency: {args.runs} runs over {args.workers} rqworker processes, steps of d = "
              f"{d * 1000:.0f} ms ({args.rounds} sleep rounds per run), seed {seed}")
        print(f"  cancelled while running: {len(latencies)}; while queued (never ran): {queued_hits}; "
              f"completed: {completed}")
        if latencies:
            ms = [x * 1000 for x in latencies]
            print(f"  stopped_at - cancel_requested_at   {'p50':>9} {'p99':>9} {'max':>9}   mean")
            print(f"    ms                             {percentile(ms, .5):9.1f} {percentile(ms, .99):9.1f} "
                  f"{max(ms):9.1f}   {statistics.fmean(ms):.1f}")
            print(f"    units of d                     {percentile(ms, .5) / (d * 1000):9.2f} "
                  f"{percentile(ms, .99) / (d * 1000):9.2f} {max(ms) / (d * 1000):9.2f}   "
                  f"{statistics.fmean(ms) / (d * 1000):.2f}")
            print(f"  model calls + tools started after the cancel was requested: {sum(after_request)} in "
                  f"{sum(1 for n in after_request if n)} runs (per run: max {max(after_request)}; a start can "
                  f"race the cancel's commit by a few ms and is then the step in flight)")
            print(f"  model calls + tools started after the stop boundary: {sum(after_boundary)}")


if __name__ == "__main__":
    main()
