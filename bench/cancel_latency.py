"""How long a cancelled queued run takes to stop, measured across real worker processes.

For each step length ``d`` (``--delays``, default 0.1 s and 5 s), enqueues K runs over W real
``manage.py rqworker`` processes. Every run is a script of rounds whose model turn takes ``d``
seconds and whose tool (``sleep``) takes ``d`` seconds, so every step in flight lasts about
``d``. From another process (which runs the ``agent_cancel`` command), cancels are issued at
random moments while runs execute; the others complete. It prints the distribution of
``stopped_at − cancel_requested_at`` (p50, p99, max) in milliseconds and in units of ``d``, by
the kind of step the cancel interrupted, beside the time until the ``cancelled`` step was
written (after the stop: ``stopped_at`` is the end of the interrupted step, recorded with it),
and, from the call journal the workers write, the model calls and tools started after each
cancel was requested and after each stop boundary.
Since a cancel interrupts the step in flight, the target is p99 ≤ 50 ms whatever ``d``.

Then each HTTP provider (``--stream-providers``: ``openai``, ``anthropic``, ``gemini``) against
the shipped server of its wire format streaming slowly, through its SDK: how many pieces of the
answer the server sent after the cancel committed, and how long after it the server saw the
connection close, side by side. No assertions.

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

from step_overhead import production_settings, throwaway_database  # noqa: E402  (bench/ is this script's directory)


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
    parser.add_argument("--delays", default="0.1,5", help="d: seconds per model turn and per tool, comma-separated")
    parser.add_argument("--rounds", type=int, default=None, help="tool rounds per run (default: 6, or 2 for d >= 1)")
    parser.add_argument("--long-runs", type=int, default=12, help="K for d >= 1 s")
    parser.add_argument("--stream-runs", type=int, default=8, help="runs cut off mid-stream, per provider (0: skip)")
    parser.add_argument("--stream-providers", default="openai,anthropic,gemini", help="providers cut off mid-stream")
    parser.add_argument("--cancel-fraction", type=float, default=0.7, help="share of runs to cancel")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--database", default="nrllm_bench_cancel", help="throwaway database to create and drop")
    parser.add_argument("--redis-url", default=os.environ.get("NRLLM_BENCH_REDIS_URL", "redis://127.0.0.1:6379/12"))
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)

    import redis

    production_settings()  # debug off here and in the workers, as in production
    os.environ["REDIS_URL"] = args.redis_url  # read by settings: this process enqueues there
    redis.Redis.from_url(args.redis_url).flushdb()
    with tempfile.TemporaryDirectory(prefix="nrllm-cancel-bench-") as workdir, throwaway_database(args.database) as url:
        for d in [float(x) for x in args.delays.split(",") if x.strip()]:
            runs = args.runs if d < 1 else args.long_runs
            rounds = args.rounds or (6 if d < 1 else 2)
            redis.Redis.from_url(args.redis_url).flushdb()
            measure(args, rng, seed, Path(workdir) / f"d{d}", url, d=d, runs=runs, rounds=rounds)
        for provider in [p.strip() for p in args.stream_providers.split(",") if p.strip()] if args.stream_runs else []:
            redis.Redis.from_url(args.redis_url).flushdb()
            measure_stream(args, rng, Path(workdir) / f"stream-{provider}", url, provider)
    redis.Redis.from_url(args.redis_url).flushdb()


def measure(
    args: argparse.Namespace,
    rng: random.Random,
    seed: int,
    workdir: Path,
    url: str,
    *,
    d: float,
    runs: int,
    rounds: int,
) -> None:
    """Run the load for one step length and print the distribution."""
    workdir.mkdir(parents=True, exist_ok=True)
    journal_path = workdir / "journal.jsonl"
    if True:  # (one throwaway database for every step length)
        from nrllm_agents.models import TERMINAL, AgentRun, AgentRunEvent, RunStatus
        from nrllm_agents.presentation.presenters import stream_finished
        from nrllm_agents.runtime.agent_runtime import AgentRuntime
        from tests.e2e.processes import Canceller, Workers, wait_for

        env = {k: v for k, v in os.environ.items() if k != "NRLLM_CALL_JOURNAL"}
        env.update(
            {
                "DATABASE_URL": url,
                "REDIS_URL": args.redis_url,
                "NRLLM_CALL_JOURNAL": str(journal_path),
                "DJANGO_SETTINGS_MODULE": "config.settings",
                "PYTHONPATH": str(ROOT),
            }
        )
        workers = Workers(env, count=args.workers, log_dir=workdir)
        canceller = Canceller(env)
        try:
            workers.start()
            canceller.start()
            runtime = AgentRuntime()
            request = {"prompt": "bench", "tools": ["sleep"], "script": script(rounds, d), "max_iterations": rounds + 1}
            run_ids = [str(runtime.enqueue(request)) for _ in range(runs)]
            targets = set(rng.sample(run_ids, round(runs * args.cancel_fraction)))
            # A target is cancelled on some tick while it runs, each tick with the same chance,
            # so the cancel lands at a random point of the run (often mid-step).
            run_seconds = (2 * rounds + 1) * d
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
            wait_for(
                lambda: all(stream_finished(r) for r in AgentRun.objects.filter(pk__in=run_ids)),
                timeout=300,
                interval=0.2,
                what="every run to finish",
            )
        finally:
            canceller.stop()
            workers.stop()

        journal: dict[str, list[dict[str, Any]]] = {}
        if journal_path.exists():
            for line in journal_path.read_text().splitlines():
                entry = json.loads(line)
                journal.setdefault(entry.get("run_id"), []).append(entry)
        latencies, after_request, after_boundary, queued_hits, completed = [], [], [], 0, 0
        written: list[float] = []  # cancel -> the ``cancelled`` step written (what stopped_at was before)
        at_step_end = 0  # runs whose stopped_at is the end of the step the cancel cut short
        by_kind: dict[str, list[float]] = {}
        for run in AgentRun.objects.filter(pk__in=run_ids):
            if run.status == RunStatus.COMPLETED:
                completed += 1
                continue
            if run.status != RunStatus.CANCELLED:
                print(f"  unexpected: run {run.pk} ended {run.status} ({run.error_class})")
                continue
            stream = list(AgentRunEvent.objects.filter(run_id=run.pk).order_by("sequence"))
            steps = [e for e in stream if e.kind != "cancelled"]
            if not steps:
                queued_hits += 1  # cancelled before a worker claimed it: it never ran
                continue
            requested = run.cancel_requested_at.timestamp()
            boundary = steps[-1].created_at.timestamp()
            starts = journal.get(str(run.pk), [])
            latency = (run.stopped_at - run.cancel_requested_at).total_seconds()
            latencies.append(latency)
            acknowledged = next((e for e in reversed(stream) if e.kind == "cancelled"), None)
            if acknowledged is not None:
                written.append((acknowledged.created_at - run.cancel_requested_at).total_seconds())
            at_step_end += run.stopped_at == steps[-1].created_at
            cut = next((s.kind for s in steps if s.payload.get("interrupted")), None)
            by_kind.setdefault(f"interrupted {cut} step" if cut else "stopped at a boundary", []).append(latency)
            after_request.append(sum(s["t"] > requested for s in starts))
            after_boundary.append(sum(s["t"] > boundary for s in starts))

        print(
            f"cancel_latency: {runs} runs over {args.workers} rqworker processes, steps of d = "
            f"{d * 1000:.0f} ms ({rounds} sleep rounds per run), seed {seed}"
        )
        print(
            f"  cancelled while running: {len(latencies)}; while queued (never ran): {queued_hits}; "
            f"completed: {completed}"
        )
        if latencies:
            ms = [x * 1000 for x in latencies]
            print(f"  stopped_at - cancel_requested_at   {'p50':>9} {'p99':>9} {'max':>9}   mean")
            print(
                f"    ms                             {percentile(ms, 0.5):9.1f} {percentile(ms, 0.99):9.1f} "
                f"{max(ms):9.1f}   {statistics.fmean(ms):.1f}"
            )
            print(
                f"    units of d                     {percentile(ms, 0.5) / (d * 1000):9.2f} "
                f"{percentile(ms, 0.99) / (d * 1000):9.2f} {max(ms) / (d * 1000):9.2f}   "
                f"{statistics.fmean(ms) / (d * 1000):.2f}"
            )
            if written:
                wms = [x * 1000 for x in written]
                print(
                    f"    cancel -> `cancelled` written    {percentile(wms, 0.5):9.1f} {percentile(wms, 0.99):9.1f} "
                    f"{max(wms):9.1f}   ms (after the stop: not part of it)"
                )
            print(f"    stopped_at = the end of the run's last step before `cancelled`: {at_step_end} of {len(ms)}")
            for kind, values in sorted(by_kind.items()):
                kms = [x * 1000 for x in values]
                print(
                    f"    {kind + ' (' + str(len(kms)) + ')':<32} {percentile(kms, 0.5):9.1f} "
                    f"{percentile(kms, 0.99):9.1f} {max(kms):9.1f}   ms"
                )
            print(
                f"  model calls + tools started after the cancel was requested: {sum(after_request)} in "
                f"{sum(1 for n in after_request if n)} runs (per run: max {max(after_request)}; a start can "
                f"race the cancel's commit by a few ms and is then the step in flight)"
            )
            print(f"  model calls + tools started after the stop boundary: {sum(after_boundary)}")


STREAM_SERVERS = {  # provider -> (server class, key variable, base URL variable)
    "openai": ("nrllm_agents.testing.chat_server.ChatCompletionServer", "OPENAI_API_KEY", "OPENAI_BASE_URL"),
    "anthropic": ("nrllm_agents.testing.anthropic_server.AnthropicServer", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
    "gemini": ("nrllm_agents.testing.gemini_server.GeminiServer", "GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL"),
}


def measure_stream(args: argparse.Namespace, rng: random.Random, workdir: Path, url: str, provider: str) -> None:
    """Runs on an HTTP provider against a slowly streaming server of its wire format, cut off mid-answer."""
    from django.utils.module_loading import import_string

    from nrllm_agents.models import AgentRun, AgentRunEvent
    from nrllm_agents.runtime.agent_runtime import AgentRuntime
    from tests.e2e.processes import Canceller, Workers, wait_for

    server_path, key_variable, url_variable = STREAM_SERVERS[provider]
    server_class = import_string(server_path)

    workdir.mkdir(parents=True, exist_ok=True)
    answer = {
        "content": " ".join(f"tok{i}" for i in range(2000)),
        "chunk_delay": 0.01,
        "usage": {"prompt_tokens": 10, "completion_tokens": 2000},
    }
    with server_class([answer], by_turn=True) as server:
        env = {k: v for k, v in os.environ.items() if k != "NRLLM_CALL_JOURNAL"}
        env.update(
            {
                "DATABASE_URL": url,
                "REDIS_URL": args.redis_url,
                key_variable: "bench-key",
                url_variable: server.base_url,
                "DJANGO_SETTINGS_MODULE": "config.settings",
                "PYTHONPATH": str(ROOT),
            }
        )
        workers = Workers(env, count=1, log_dir=workdir)  # one answer at a time: server logs match runs
        canceller = Canceller(env)
        cut_at: dict[str, float] = {}
        try:
            workers.start()
            canceller.start()
            runtime = AgentRuntime()
            run_ids = [
                str(runtime.enqueue({"prompt": "bench", "provider": provider, "model": "slow", "tools": []}))
                for _ in range(args.stream_runs)
            ]
            for run_id in run_ids:
                wait_for(
                    lambda: AgentRunEvent.objects.filter(run_id=run_id).exists(),
                    timeout=120,
                    interval=0.01,
                    what="the run to send its first request",
                )
                time.sleep(rng.uniform(0.3, 1.5))  # mid-answer: the whole answer takes 20 s
                cut_at[run_id] = canceller.cancel(run_id)["t"]
            wait_for(
                lambda: not AgentRun.objects.filter(pk__in=run_ids, stopped_at__isnull=True).exists(),
                timeout=120,
                interval=0.05,
                what="every run to stop",
            )
        finally:
            canceller.stop()
            workers.stop()
        logs = [log for log in server.streams if log.sent]
        for run in AgentRun.objects.filter(pk__in=run_ids).exclude(status="cancelled"):
            print(f"  unexpected: run {run.pk} ended {run.status} ({run.error_class}: {run.error_message[:200]})")
    after = [sum(1 for t, _ in log.sent if t > at) for log, at in zip(logs, cut_at.values())]
    closed = [(log.disconnected_at - at) * 1000 for log, at in zip(logs, cut_at.values()) if log.disconnected_at]
    print(
        f"streaming: {len(logs)} answers of 2000 pieces, 10 ms apart, on the {provider} provider, cancelled mid-answer"
    )
    if after:
        print(
            f"  pieces the server sent after the cancel returned: p50 {percentile(after, 0.5)}, "
            f"max {max(after)} (one piece is one token here)"
        )
    if closed:
        print(
            f"  server saw the connection close, ms after the cancel returned: p50 {percentile(closed, 0.5):.1f}, "
            f"max {max(closed):.1f} ({len(closed)} of {len(logs)} closed early)"
        )


if __name__ == "__main__":
    main()
