"""What a step boundary costs: the runtime's per-step bookkeeping beside a raw-psycopg floor.

Runs N steps with the scripted provider at zero delay (calculator tool calls, so each round
records ``request``, ``llm`` and ``tool``) and times the trace hook on every step
(``SegmentTrace.__call__``): renew the run's lease and record the step in one commit; the
ownership-guarded renewal is the cancellation probe (on PostgreSQL a single statement). On the very same
step, right beside it, it times the floor: the same row written with raw psycopg, one
``INSERT`` into the event table plus one primary-key ``SELECT`` of a run's status, on a
connection of its own. Both see the same moment's load; which goes first alternates. It prints
both distributions and their ratio. No assertions; numbers only.

PostgreSQL only. ``DATABASE_URL`` names the server (and credentials); the benchmark creates,
migrates and finally drops its own database (``nrllm_bench`` unless ``--database``)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/step_overhead.py
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


@contextlib.contextmanager
def throwaway_database(name: str) -> Iterator[str]:
    """Create database ``name`` on the server of ``DATABASE_URL``, point Django at it, migrate it;
    drop it afterwards. Yields its URL."""
    import dj_database_url
    import psycopg

    url = os.environ.get("DATABASE_URL", "")
    config = dj_database_url.parse(url) if url else {}
    if config.get("ENGINE") != "django.db.backends.postgresql":
        sys.exit("this benchmark needs PostgreSQL: set DATABASE_URL=postgres://user@host:port/db")
    server = dict(host=config["HOST"] or "127.0.0.1", port=config["PORT"] or 5432,
                  user=config["USER"] or "postgres", password=config["PASSWORD"] or None)
    with psycopg.connect(dbname="postgres", autocommit=True, **server) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    auth = config["USER"] or "postgres"
    if config["PASSWORD"]:
        auth += f":{config['PASSWORD']}"
    bench_url = f"postgres://{auth}@{server['host']}:{server['port']}/{name}"
    os.environ["DATABASE_URL"] = bench_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    try:
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0, interactive=False)
        yield bench_url
    finally:
        with contextlib.suppress(Exception):
            from django.db import connections

            connections.close_all()
        with psycopg.connect(dbname="postgres", autocommit=True, **server) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def summary(samples: list[float]) -> dict[str, float]:
    """Mean, p50 and p99 of samples (seconds), in milliseconds."""
    ordered = sorted(samples)
    return {"mean": statistics.fmean(ordered) * 1000, "p50": ordered[len(ordered) // 2] * 1000,
            "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000}


class Floor:
    """The raw-psycopg floor: one INSERT of the step's row and one primary-key SELECT."""

    def __init__(self, url: str, run_id: uuid.UUID) -> None:
        import psycopg

        from nrllm_agents.models import AgentRun, AgentRunEvent

        self.conn = psycopg.connect(url, autocommit=True)  # each statement commits, as Django's do
        self.run_id = run_id
        self.sequence = 0
        self.insert = (f"INSERT INTO {AgentRunEvent._meta.db_table} "
                       f"(run_id, sequence, kind, round, duration_ms, payload, created_at) "
                       f"VALUES (%s, %s, %s, %s, %s, %s::jsonb, now())")
        self.select = f"SELECT status FROM {AgentRun._meta.db_table} WHERE id = %s"

    def record(self, step: Any) -> None:
        payload = json.dumps(step.payload)
        with self.conn.cursor() as cur:
            cur.execute(self.insert, (self.run_id, self.sequence, step.kind.value, step.round, step.duration_ms,
                                      payload))
            cur.execute(self.select, (self.run_id,))
            cur.fetchone()
        self.sequence += 1


def measure_side_by_side(floor: Floor, hook_samples: list[float], floor_samples: list[float]) -> Callable[[], None]:
    """Wrap the segment trace hook: time it (record + probe) and, on the same step, the floor.

    The two alternate which goes first, so neither always meets a freshly committed WAL or a
    warm cache. Returns a function that removes the wrapper.
    """
    from nrllm_agents.segment import SegmentTrace

    original = SegmentTrace.__call__

    def timed(call: Callable[[], None], into: list[float]) -> None:
        t0 = time.perf_counter()
        call()
        into.append(time.perf_counter() - t0)

    def hook(self: Any, step: Any) -> None:
        pair = [lambda: timed(lambda: original(self, step), hook_samples),
                lambda: timed(lambda: floor.record(step), floor_samples)]
        for call in pair if len(hook_samples) % 2 else reversed(pair):
            call()

    SegmentTrace.__call__ = hook  # type: ignore[method-assign]
    return lambda: setattr(SegmentTrace, "__call__", original)


def run_many(rounds: int, runs: int) -> int:
    """``runs`` interactive runs of ``rounds`` calculator rounds each; returns the steps recorded."""
    from nrllm_agents.runtime import AgentRuntime

    runtime = AgentRuntime()
    script = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i} * 7"}}]}
              for i in range(rounds)] + [{"content": "done"}]
    request = {"prompt": "bench", "tools": ["calculator"], "script": script, "max_iterations": rounds + 1}
    steps = 0
    for _ in range(runs):
        result = runtime.run(request)
        assert result.outcome == "completed", result
        steps += result.steps
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3000, help="steps to time (approximately)")
    parser.add_argument("--rounds", type=int, default=50, help="tool rounds per run (3 steps each)")
    parser.add_argument("--database", default="nrllm_bench", help="throwaway database to create and drop")
    args = parser.parse_args()

    with throwaway_database(args.database) as url:
        from django.db import connection

        from nrllm_agents import store
        from nrllm_agents.requests import RunRequest

        steps_per_run = 3 * args.rounds + 2
        runs = max(1, round(args.steps / steps_per_run))
        # The run row the floor appends to and probes.
        floor = Floor(url, store.begin(RunRequest.from_mapping({"prompt": "floor", "tools": []}).row_fields()).pk)
        hook: list[float] = []
        raw: list[float] = []
        undo = measure_side_by_side(floor, hook, raw)
        try:
            run_many(2, 1)  # warm imports, caches and both connections
            hook.clear()
            raw.clear()
            t0 = time.perf_counter()
            steps = run_many(args.rounds, runs)
            wall = time.perf_counter() - t0
        finally:
            undo()
            floor.conn.close()
        h, r = summary(hook), summary(raw)
        connection.ensure_connection()
        version = connection.connection.info.server_version
        print(f"step_overhead: PostgreSQL {version // 10000}.{version % 10000}, {steps} steps "
              f"({runs} runs x {steps_per_run} steps), scripted provider at zero delay, calculator tool; "
              f"each step timed through the runtime's hook and, beside it, through the raw floor")
        print(f"  {'':34} {'mean':>9} {'p50':>9} {'p99':>9}   (ms per step)")
        print(f"  {'runtime hook (probe + record)':34} {h['mean']:9.3f} {h['p50']:9.3f} {h['p99']:9.3f}")
        print(f"  {'raw psycopg (INSERT + PK SELECT)':34} {r['mean']:9.3f} {r['p50']:9.3f} {r['p99']:9.3f}")
        print(f"  {'ratio hook / floor':34} {h['mean'] / r['mean']:8.2f}x {h['p50'] / r['p50']:8.2f}x "
              f"{h['p99'] / r['p99']:8.2f}x")
        rest = wall - sum(hook) - sum(raw)
        print(f"  everything else per step (loop, provider, tool, begin/settle): {rest / steps * 1000:.3f} ms")


if __name__ == "__main__":
    main()
