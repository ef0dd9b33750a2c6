"""Many concurrent runs: the threaded ``agent_worker`` beside today's fork-per-job ``rqworker``.

Waves of runs (``--waves``, default 100, 500, 1000) whose model calls and ``sleep`` tools each
take ``--min-delay``–``--max-delay`` seconds (2–10 s) are enqueued as fast as 8 threads can,
then executed by ``--processes`` ``agent_worker`` processes (``--concurrency`` = wave / processes).
Beside them, the same measurement for ``--fork-workers`` forking ``rqworker`` processes (today's
worker: one process plus one work horse per run in flight) on a wave of ``--fork-runs``.
Once a whole wave executes, ``--cancel-fraction`` of its runs are cancelled at random moments.
Each worker process has a pool of ``--pool-max`` connections (``NRLLM_DB_POOL_MAX``, 20).

Per wave it prints: peak concurrent runs; peak PSS of the worker processes (and their work
horses) per concurrent run, total and above the idle worker; peak PostgreSQL connections of
the workers (``pg_stat_activity`` by ``application_name``; the cancel listener, one per process,
names itself and is counted apart); enqueue → first step (p50/p99/max); cancel → stop
(``stopped_at − cancel_requested_at``, p50/p99/max); database CPU per step boundary (user+system
time of the workers' backends, sampled from ``/proc`` every 0.2 s, divided by the steps
recorded). Nothing is asserted.

PostgreSQL (``DATABASE_URL`` names the server; a throwaway database is created and dropped) and
Redis (``--redis-url``, flushed: use a db of its own)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/concurrency.py
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from step_overhead import throwaway_database  # noqa: E402  (bench/ is this script's directory)

TICK = os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] if ordered else float("nan")


def pss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = [int(c) for c in (task / "children").read_text().split()]
            except (OSError, ValueError):
                kids = []
            found += kids
            todo += kids
    return found


def cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except (OSError, IndexError, ValueError):
        return None


def script(rng: random.Random, rounds: int, low: float, high: float) -> list[dict[str, Any]]:
    turns = [
        {
            "delay": round(rng.uniform(low, high), 2),
            "tool_calls": [{"name": "sleep", "arguments": {"seconds": round(rng.uniform(low, high), 2)}}],
        }
        for _ in range(rounds)
    ]
    return turns + [{"delay": round(rng.uniform(low, high), 2), "content": "done"}]


class Monitor:
    """Samples running runs, PSS, connections and backend CPU every 0.2 s on a thread."""

    def __init__(self, app_name: str, root_pids: list[int], ids: list[str]) -> None:
        self.app_name, self.root_pids, self.ids = app_name, root_pids, ids
        self.peak_running = self.peak_pss = self.peak_conns = self.listeners = 0
        self.idle_pss = sum(pss_kb(p) for p in root_pids)
        self.backend_cpu: dict[int, tuple[float, float]] = {}  # pid -> (first seen, last seen)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Monitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        from django.db import connection, connections

        from nrllm_agents.models import AgentRun, RunStatus

        try:
            while not self._stop.is_set():
                running = AgentRun.objects.filter(pk__in=self.ids, status=RunStatus.RUNNING).count()
                pids = [p for root in self.root_pids for p in (root, *descendants(root))]
                pss = sum(pss_kb(p) for p in pids)
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT pid, application_name FROM pg_stat_activity WHERE application_name IN "
                        "(%s, 'nrllm-cancel-listener') AND datname = current_database() AND pid <> pg_backend_pid()",
                        [self.app_name],
                    )
                    rows = cursor.fetchall()
                mine = [pid for pid, name in rows if name == self.app_name]
                for pid in mine:
                    now = cpu_seconds(pid)
                    if now is not None:
                        first = self.backend_cpu.get(pid, (now, now))[0]
                        self.backend_cpu[pid] = (first, now)
                self.peak_running = max(self.peak_running, running)
                self.peak_pss = max(self.peak_pss, pss)
                self.peak_conns = max(self.peak_conns, len(mine))
                self.listeners = max(self.listeners, len(rows) - len(mine))
                self._stop.wait(0.2)
        finally:
            connections.close_all()

    def db_cpu(self) -> float:
        return sum(last - first for first, last in self.backend_cpu.values())


def measure(args: argparse.Namespace, rng: random.Random, workdir: Path, url: str, *, mode: str, runs: int) -> None:
    import redis
    from django.db import connections

    from nrllm_agents.models import AgentRun, AgentRunEvent
    from nrllm_agents.presentation.presenters import stream_finished
    from nrllm_agents.runtime.agent_runtime import AgentRuntime
    from tests.e2e.processes import Workers, wait_for

    redis.Redis.from_url(args.redis_url).flushdb()
    app_name = f"nrllm-bench-{uuid.uuid4().hex[:6]}"
    env = {k: v for k, v in os.environ.items() if k != "NRLLM_CALL_JOURNAL"}
    env.update(
        {
            "DATABASE_URL": url,
            "REDIS_URL": args.redis_url,
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "PYTHONPATH": str(ROOT),
            "PGAPPNAME": app_name,
            "NRLLM_LEASE_SECONDS": "60",
            "NRLLM_DB_POOL_MAX": str(args.pool_max),
        }
    )
    if mode == "threaded":
        count = args.processes
        workers = Workers(
            env,
            count=count,
            log_dir=workdir / f"{mode}-{runs}",
            command="agent_worker",
            extra_args=("--concurrency", str(-(-runs // count))),
        )
    else:
        count = args.fork_workers
        workers = Workers(env, count=count, log_dir=workdir / f"{mode}-{runs}")
    runtime = AgentRuntime()
    cancelled: set[str] = set()
    try:
        workers.start(timeout=120)
        time.sleep(1)
        ids: list[str] = []
        with Monitor(app_name, [p.pid for p in workers.processes], ids) as monitor:
            requests = [
                {
                    "prompt": "bench",
                    "tools": ["sleep"],
                    "max_iterations": args.rounds + 1,
                    "script": script(rng, args.rounds, args.min_delay, args.max_delay),
                }
                for _ in range(runs)
            ]

            def one(request: dict[str, Any]) -> str:
                try:
                    return str(runtime.enqueue(request))
                finally:
                    connections.close_all()

            t0 = time.monotonic()
            with ThreadPoolExecutor(8) as pool:
                ids.extend(pool.map(one, requests))
            enqueue_s = time.monotonic() - t0
            # Cancels land at random moments once the whole wave executes (the load at its peak).
            wait_for(
                lambda: not AgentRun.objects.filter(pk__in=ids, status="queued").exists(),
                timeout=600,
                interval=0.2,
                what="the whole wave to start",
            )
            targets = rng.sample(ids, round(runs * args.cancel_fraction))
            for run_id in targets:
                time.sleep(rng.uniform(0, 0.4))
                if runtime.cancel(run_id, source="system", reason="bench").outcome.value == "cancelled":
                    cancelled.add(run_id)
            wait_for(
                lambda: all(stream_finished(r) for r in AgentRun.objects.filter(pk__in=ids)),
                timeout=3600,
                interval=1.0,
                what="every run to finish",
            )
    finally:
        workers.stop()

    first_step, stops = [], []
    for run in AgentRun.objects.filter(pk__in=ids):
        first = AgentRunEvent.objects.filter(run_id=run.pk, sequence=0).values_list("created_at", flat=True).first()
        if first is not None:
            first_step.append((first - run.created_at).total_seconds() * 1000)
        if (
            str(run.pk) in cancelled
            and run.stopped_at
            and run.cancel_requested_at
            and AgentRunEvent.objects.filter(run_id=run.pk).exclude(kind="cancelled").exists()
        ):
            stops.append((run.stopped_at - run.cancel_requested_at).total_seconds() * 1000)
    steps = AgentRunEvent.objects.filter(run_id__in=ids).count()
    per_run = monitor.peak_pss / max(1, monitor.peak_running) / 1024
    above_idle = (monitor.peak_pss - monitor.idle_pss) / max(1, monitor.peak_running) / 1024
    label = f"{mode} ({count} {'agent_worker' if mode == 'threaded' else 'rqworker'} processes)"
    print(
        f"{label}, wave of {runs} runs (enqueued in {enqueue_s:.1f} s), steps of "
        f"{args.min_delay:g}-{args.max_delay:g} s, {args.rounds} tool rounds"
    )
    print(f"  peak concurrent runs              {monitor.peak_running}")
    print(
        f"  peak PSS                          {monitor.peak_pss / 1024:.0f} MB (idle {monitor.idle_pss / 1024:.0f} MB):"
        f" {per_run:.2f} MB per concurrent run, {above_idle:.2f} MB above idle"
    )
    print(f"  peak PostgreSQL connections       {monitor.peak_conns} (+ {monitor.listeners} cancel listeners)")
    print(
        f"  enqueue -> first step (ms)        p50 {percentile(first_step, 0.5):.0f}  p99 "
        f"{percentile(first_step, 0.99):.0f}  max {max(first_step, default=float('nan')):.0f}"
    )
    print(
        f"  cancel -> stop (ms), {len(stops):4d} runs   p50 {percentile(stops, 0.5):.1f}  p99 "
        f"{percentile(stops, 0.99):.1f}  max {max(stops, default=float('nan')):.1f}"
    )
    print(
        f"  database CPU per step boundary    {monitor.db_cpu() / max(1, steps) * 1000:.3f} ms "
        f"({steps} steps, {monitor.db_cpu():.1f} s of backend CPU)"
    )
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--waves", default="100,500,1000", help="runs per wave for agent_worker, comma-separated")
    parser.add_argument(
        "--processes", type=int, default=1, help="agent_worker processes (concurrency = wave/processes)"
    )
    parser.add_argument(
        "--fork-workers", type=int, default=20, help="rqworker processes for the forking side (0: skip)"
    )
    parser.add_argument("--fork-runs", type=int, default=40, help="the forking side's wave")
    parser.add_argument("--rounds", type=int, default=3, help="tool rounds per run")
    parser.add_argument("--pool-max", type=int, default=20, help="NRLLM_DB_POOL_MAX of each worker process")
    parser.add_argument("--min-delay", type=float, default=2.0)
    parser.add_argument("--max-delay", type=float, default=10.0)
    parser.add_argument("--cancel-fraction", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--database", default="nrllm_bench_many", help="throwaway database to create and drop")
    parser.add_argument("--redis-url", default=os.environ.get("NRLLM_BENCH_REDIS_URL", "redis://127.0.0.1:6379/12"))
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    os.environ["REDIS_URL"] = args.redis_url  # read by settings: this process enqueues there
    os.environ["NRLLM_DB_POOL_MAX"] = "0"  # this process's own connections: one per thread, no pool
    print(f"concurrency: seed {seed}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="nrllm-many-bench-") as workdir, throwaway_database(args.database) as url:
        for runs in [int(x) for x in args.waves.split(",") if x.strip()]:
            measure(args, rng, Path(workdir), url, mode="threaded", runs=runs)
        if args.fork_workers:
            measure(args, rng, Path(workdir), url, mode="fork", runs=args.fork_runs)
    import redis

    redis.Redis.from_url(args.redis_url).flushdb()


if __name__ == "__main__":
    main()
