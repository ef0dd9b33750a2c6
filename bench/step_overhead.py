"""What a step boundary costs: the runtime's per-step bookkeeping beside a raw-psycopg floor.

Runs N steps with the scripted provider at zero delay (calculator tool calls, so each round
records ``request``, ``llm`` and ``tool``) and times the trace hook on every step
(``SegmentTrace.__call__``): renew the run's lease and record the step in one commit; the
ownership-guarded renewal is the cancellation probe (on PostgreSQL a single statement). On the very same
step, right beside it, it times the floor: the same row written with raw psycopg, one
``INSERT`` into the event table plus one primary-key ``SELECT`` of a run's status, on a
connection of its own. Both see the same moment's load; which goes first alternates. It prints
both distributions and their ratio. No assertions; numbers only.

Then the cost of tracing (``--tracing-blocks``): the same zero-delay runs with tracing off (no
provider: what every figure above measures) and on (the SDK's provider, a batch processor and the
OTLP/HTTP exporter sending to a receiver on loopback), in alternating steady-state blocks.

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
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

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
    server = dict(
        host=config["HOST"] or "127.0.0.1",
        port=config["PORT"] or 5432,
        user=config["USER"] or "postgres",
        password=config["PASSWORD"] or None,
    )
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

            from nrllm_agents.live.interrupts import watcher

            watcher.stop()  # its listening connection must not outlive the database
            connections.close_all()
        with psycopg.connect(dbname="postgres", autocommit=True, **server) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def production_settings() -> None:
    """Debug off (no query log), as production runs; throwaway keys for the bench (the secret
    key, and the Fernet key of connections' API keys, which production requires too)."""
    from cryptography.fernet import Fernet

    os.environ["DJANGO_DEBUG"] = "0"
    os.environ.setdefault("DJANGO_SECRET_KEY", "bench-only-" + uuid.uuid4().hex)
    os.environ.setdefault("NRLLM_SECRET_KEYS", Fernet.generate_key().decode())


def summary(samples: list[float]) -> dict[str, float]:
    """Mean, p50 and p99 of samples (seconds), in milliseconds."""
    ordered = sorted(samples)
    return {
        "mean": statistics.fmean(ordered) * 1000,
        "p50": ordered[len(ordered) // 2] * 1000,
        "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
    }


class Floors:
    """What the runtime's boundary is compared with, on a running run row of their own.

    - ``prepared``: the boundary's very statement (``store.leases._RECORD_SQL``: the guarded
      lease renewal feeding the step's ``INSERT``) sent with raw psycopg on a connection of
      its own, server-side bound and prepared: the floor.
    - ``django``: the same statement through a Django cursor (client-side binding, parsed
      and planned on every step), i.e. the boundary as it was before it was prepared.
    """

    def __init__(self, url: str, run_id: uuid.UUID, owner: str) -> None:
        import psycopg

        from nrllm_agents.store.leases import _RECORD_SQL

        self.conn = psycopg.connect(url, autocommit=True)  # each statement commits, as the boundary does
        self.sql = _RECORD_SQL
        self.run_id, self.owner = run_id, owner
        self.sequence = 0

    def _params(self, step: Any) -> list[Any]:
        from nrllm_agents.store import lease_until

        self.sequence += 1
        return [
            lease_until(),
            self.run_id,
            "running",
            self.owner,
            self.sequence,
            step.kind.value,
            step.round,
            step.duration_ms,
            json.dumps(step.payload, default=str),
            datetime.now(UTC),
        ]

    def prepared(self, step: Any) -> None:
        with self.conn.cursor() as cur:
            cur.execute(self.sql, self._params(step), prepare=True)
            assert cur.rowcount == 1

    def django(self, step: Any) -> None:
        from django.db import connection

        with connection.cursor() as cur:
            cur.execute(self.sql, self._params(step))
            assert cur.rowcount == 1


def measure_side_by_side(floors: Floors, samples: dict[str, list[float]]) -> Callable[[], None]:
    """Wrap the segment trace hook: time it and, on the same step, each floor.

    The order rotates from step to step, so none always meets a freshly committed WAL or a
    warm cache. Returns a function that removes the wrapper.
    """
    from nrllm_agents.runtime.segment import SegmentTrace

    original = SegmentTrace.__call__

    def timed(call: Callable[[], None], into: list[float]) -> None:
        t0 = time.perf_counter()
        call()
        into.append(time.perf_counter() - t0)

    def hook(self: Any, step: Any) -> None:
        calls = [
            lambda: timed(lambda: original(self, step), samples["hook"]),
            lambda: timed(lambda: floors.prepared(step), samples["prepared"]),
            lambda: timed(lambda: floors.django(step), samples["django"]),
        ]
        shift = len(samples["hook"]) % len(calls)
        for call in calls[shift:] + calls[:shift]:
            call()

    SegmentTrace.__call__ = hook  # type: ignore[method-assign]
    return lambda: setattr(SegmentTrace, "__call__", original)


def hot_share(table: str) -> tuple[int, int]:
    """(updates, HOT updates) of ``table`` so far, from PostgreSQL's statistics."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT pg_stat_force_next_flush()")
        cur.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = %s", [table])
        return cur.fetchone()


def run_many(rounds: int, runs: int) -> int:
    """``runs`` interactive runs of ``rounds`` calculator rounds each; returns the steps recorded."""
    from nrllm_agents.runtime.agent_runtime import AgentRuntime

    runtime = AgentRuntime()
    script = [
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i} * 7"}}]} for i in range(rounds)
    ] + [{"content": "done"}]
    request = {"prompt": "bench", "tools": ["calculator"], "script": script, "max_iterations": rounds + 1}
    steps = 0
    for _ in range(runs):
        result = runtime.run(request)
        assert result.outcome == "completed", result
        steps += result.steps
    return steps


PLAIN_TABLES = """
CREATE TABLE bench_plain_run (id uuid PRIMARY KEY, status text NOT NULL, claimed_by text NOT NULL,
                              lease_expires timestamptz);
CREATE TABLE bench_plain_event (run_id uuid NOT NULL, sequence integer NOT NULL, kind text NOT NULL,
                                round integer NOT NULL, duration_ms integer, payload jsonb NOT NULL,
                                created_at timestamptz NOT NULL, PRIMARY KEY (run_id, sequence));
"""
PLAIN_SQL = (
    "WITH renewed AS (UPDATE bench_plain_run SET lease_expires = %s "
    "WHERE id = %s AND status = %s AND claimed_by = %s RETURNING id) "
    "INSERT INTO bench_plain_event (run_id, sequence, kind, round, duration_ms, payload, created_at) "
    "SELECT id, %s, %s, %s, %s, %s::jsonb, %s FROM renewed"
)


def end_to_end(url: str, rounds: int, runs: int, *, block: int = 1) -> tuple[list[float], list[float]]:
    """A step end to end against the floor: the gaps between the ``created_at`` of consecutive
    steps of zero-delay runs (everything a step costs: loop, provider, tool, bookkeeping, the
    boundary), and as many executions of a fused prepared statement (the renewal feeding the
    insert) on two plain tables with nothing but their primary keys, on a raw connection.

    They alternate in blocks of ``block`` runs and as many floor statements. ``block=1``
    alternates run by run; a larger block measures each side in its steady state, its first run
    (and the floor's first run's worth of statements) a warm-up dropped from the figures."""
    import psycopg

    from nrllm_agents.models import AgentRunEvent
    from nrllm_agents.runtime.agent_runtime import AgentRuntime

    runtime = AgentRuntime()
    script = [
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i} * 7"}}]} for i in range(rounds)
    ] + [{"content": "done"}]
    request = {"prompt": "bench", "tools": ["calculator"], "script": script, "max_iterations": rounds + 1}
    conn = psycopg.connect(url, autocommit=True)
    conn.execute("DROP TABLE IF EXISTS bench_plain_run, bench_plain_event")
    conn.execute(PLAIN_TABLES)
    plain_run = uuid.uuid4()
    conn.execute("INSERT INTO bench_plain_run VALUES (%s, 'running', 'floor', now())", [plain_run])
    payload = json.dumps({"name": "calculator", "arguments": {"expression": "1 * 7"}, "result": "7"})
    gaps: list[float] = []
    floor: list[float] = []
    sequence = 0
    by_run = block == 1  # run by run, the first pair is the warm-up; in blocks, each block's first run
    try:
        for i in range(max(1, runs // block) + (1 if by_run else 0)):
            steps = 0
            for j in range(block):
                result = runtime.run(request)
                assert result.outcome == "completed", result
                stamps = list(
                    AgentRunEvent.objects.filter(run_id=result.run_id)
                    .order_by("sequence")
                    .values_list("created_at", flat=True)
                )
                steps += len(stamps)
                if (i > 0) if by_run else (j > 0):
                    gaps += [(b - a).total_seconds() for a, b in zip(stamps, stamps[1:], strict=False)]
            for k in range(steps):
                sequence += 1
                t0 = time.perf_counter()
                with conn.cursor() as cur:
                    cur.execute(
                        PLAIN_SQL,
                        [
                            datetime.now(UTC),
                            plain_run,
                            "running",
                            "floor",
                            sequence,
                            "tool",
                            0,
                            1,
                            payload,
                            datetime.now(UTC),
                        ],
                        prepare=True,
                    )
                if (i > 0) if by_run else (k >= steps // block):
                    floor.append(time.perf_counter() - t0)
    finally:
        conn.close()
    return gaps, floor


def run_gaps(runtime: Any, request: dict[str, Any]) -> list[float]:
    """One run's gaps between the ``created_at`` of consecutive steps (seconds)."""
    from nrllm_agents.models import AgentRunEvent

    result = runtime.run(request)
    assert result.outcome == "completed", result
    stamps = list(
        AgentRunEvent.objects.filter(run_id=result.run_id).order_by("sequence").values_list("created_at", flat=True)
    )
    return [(b - a).total_seconds() for a, b in zip(stamps, stamps[1:], strict=False)]


def tracing_cost(rounds: int, blocks: int, block: int) -> tuple[list[float], list[float], int]:
    """A step end to end with tracing off and on: ``blocks`` pairs of blocks of ``block`` runs,
    which side goes first alternating, each block's first run a warm-up. On: the SDK's provider
    with a batch processor and the OTLP/HTTP exporter to a receiver on loopback (a real export,
    on the exporter's own thread). Returns (gaps off, gaps on, spans received)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from nrllm_agents.observability import tracing
    from nrllm_agents.runtime.agent_runtime import AgentRuntime
    from nrllm_agents.testing.otlp_receiver import OtlpReceiver

    runtime = AgentRuntime()
    script = [
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i} * 7"}}]} for i in range(rounds)
    ] + [{"content": "done"}]
    request = {"prompt": "bench", "tools": ["calculator"], "script": script, "max_iterations": rounds + 1}
    gaps: dict[bool, list[float]] = {False: [], True: []}
    with OtlpReceiver() as receiver:
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{receiver.endpoint}/v1/traces")))
        try:
            for i in range(blocks):
                for traced in (False, True) if i % 2 == 0 else (True, False):
                    tracing.install(provider if traced else None)
                    for j in range(block):
                        found = run_gaps(runtime, request)
                        if j > 0:
                            gaps[traced] += found
        finally:
            tracing.uninstall()
            provider.force_flush()
            provider.shutdown()
        return gaps[False], gaps[True], len(receiver.spans)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3000, help="steps to time (approximately)")
    parser.add_argument("--rounds", type=int, default=50, help="tool rounds per run (3 steps each)")
    parser.add_argument("--database", default="nrllm_bench", help="throwaway database to create and drop")
    parser.add_argument(
        "--block", type=int, default=5, help="runs per block in the steady-state end-to-end schedule (at least 2)"
    )
    parser.add_argument(
        "--tracing-blocks", type=int, default=4, help="pairs of blocks (off, on) timing the cost of tracing (0: none)"
    )
    args = parser.parse_args()
    if args.block < 2:
        parser.error("--block must be at least 2 (1 is the run-by-run schedule, printed anyway)")

    production_settings()
    with throwaway_database(args.database) as url:
        from django.db import connection

        from nrllm_agents import store
        from nrllm_agents.models import AgentRun
        from nrllm_agents.validation.run_request import RunRequest

        steps_per_run = 3 * args.rounds + 2
        runs = max(1, round(args.steps / steps_per_run))
        # The running run row the floors renew and append to.
        floor_run = store.begin(
            RunRequest.from_mapping({"prompt": "floor", "tools": []}).row_fields(),
            claimed_by="floor",
            lease_expires=store.lease_until(),
        ).pk
        floors = Floors(url, floor_run, "floor")
        samples: dict[str, list[float]] = {"hook": [], "prepared": [], "django": []}
        undo = measure_side_by_side(floors, samples)
        try:
            run_many(2, 1)  # warm imports, caches and both connections
            for values in samples.values():
                values.clear()
            updates0, hot0 = hot_share(AgentRun._meta.db_table)
            t0 = time.perf_counter()
            steps = run_many(args.rounds, runs)
            wall = time.perf_counter() - t0
            updates1, hot1 = hot_share(AgentRun._meta.db_table)
        finally:
            undo()
            floors.conn.close()
        h, p, d = (summary(samples[k]) for k in ("hook", "prepared", "django"))
        connection.ensure_connection()
        version = connection.connection.info.server_version
        print(
            f"step_overhead: PostgreSQL {version // 10000}.{version % 10000}, {steps} steps "
            f"({runs} runs x {steps_per_run} steps), DEBUG off, scripted provider at zero delay, calculator "
            f"tool; each step timed through the runtime's hook and, beside it, through each floor"
        )
        print(f"  {'':44} {'mean':>9} {'p50':>9} {'p99':>9}   (ms per step)")
        print(f"  {'runtime hook (renew + probe + append)':44} {h['mean']:9.3f} {h['p50']:9.3f} {h['p99']:9.3f}")
        print(f"  {'floor: same statement, raw psycopg, prepared':44} {p['mean']:9.3f} {p['p50']:9.3f} {p['p99']:9.3f}")
        print(f"  {'same statement via a Django cursor':44} {d['mean']:9.3f} {d['p50']:9.3f} {d['p99']:9.3f}")
        print(
            f"  {'ratio hook / prepared floor':44} {h['mean'] / p['mean']:8.2f}x {h['p50'] / p['p50']:8.2f}x "
            f"{h['p99'] / p['p99']:8.2f}x"
        )
        print(
            f"  {'ratio Django cursor / prepared floor':44} {d['mean'] / p['mean']:8.2f}x {d['p50'] / p['p50']:8.2f}x "
            f"{d['p99'] / p['p99']:8.2f}x"
        )
        updates, hot = updates1 - updates0, hot1 - hot0
        print(
            f"  run-table updates during the timed runs: {updates}, of which HOT: {hot} "
            f"({100 * hot / max(1, updates):.0f}%)"
        )
        rest = wall - sum(sum(v) for v in samples.values())
        print(f"  everything else per step (loop, provider, tool, begin/settle): {rest / steps * 1000:.3f} ms")
        schedules = (
            ("alternating run by run", 1),
            (f"in steady-state blocks of {args.block} runs, each block's first run a warm-up", args.block),
        )
        for label, block in schedules:
            gaps, plain = end_to_end(url, args.rounds, max(runs, 2 * block), block=block)
            g, f = summary(gaps), summary(plain)
            print(
                f"end to end ({len(gaps)} steps: the gap between consecutive steps' created_at in zero-delay runs) "
                f"against a fused prepared statement on two plain tables, {label}"
            )
            print(f"  {'a step, end to end':44} {g['mean']:9.3f} {g['p50']:9.3f} {g['p99']:9.3f}")
            print(f"  {'floor: fused statement, plain tables':44} {f['mean']:9.3f} {f['p50']:9.3f} {f['p99']:9.3f}")
            print(
                f"  {'ratio step / plain floor':44} {g['mean'] / f['mean']:8.2f}x {g['p50'] / f['p50']:8.2f}x "
                f"{g['p99'] / f['p99']:8.2f}x"
            )
        if args.tracing_blocks:
            off, on, received = tracing_cost(args.rounds, args.tracing_blocks, args.block)
            o, t = summary(off), summary(on)
            print(
                f"tracing ({len(off)} steps off, {len(on)} on, {received} spans received over OTLP/HTTP on loopback), "
                f"alternating blocks of {args.block} runs: a step end to end"
            )
            print(f"  {'tracing off (no provider)':44} {o['mean']:9.3f} {o['p50']:9.3f} {o['p99']:9.3f}")
            print(f"  {'tracing on (SDK, batch, OTLP/HTTP)':44} {t['mean']:9.3f} {t['p50']:9.3f} {t['p99']:9.3f}")
            print(
                f"  {'overhead per step, on - off (ms)':44} {t['mean'] - o['mean']:9.3f} {t['p50'] - o['p50']:9.3f} "
                f"{t['p99'] - o['p99']:9.3f}"
            )
            print(
                f"  {'ratio on / off':44} {t['mean'] / o['mean']:8.2f}x {t['p50'] / o['p50']:8.2f}x "
                f"{t['p99'] / o['p99']:8.2f}x"
            )


if __name__ == "__main__":
    main()
