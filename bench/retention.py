"""A retention pass over many runs (issue 45): what it frees, and what it costs a run beside it.

Fills a throwaway PostgreSQL database by SQL (not the ORM) with ``--runs`` stopped runs of
``--steps`` steps each (90% completed, 10% cancelled, small payloads), all finished past
``content_days``. Then:

1. a running run records ``--boundaries`` step boundaries (``store.record_step``, each its own
   commit) with nothing else going on: the baseline p50 / p99;
2. the same run records boundaries while a retention pass (``store.retention.apply``, batches of
   ``--batch``) purges every filled run's content: p50 / p99 beside the pass, and the pass's time;
3. the bytes of the run, step and note tables before the pass, after it, after ``VACUUM`` and
   after ``VACUUM FULL``; and a check that every skeleton field survived.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/retention.py --runs 100000
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DJANGO_DEBUG", "0")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection, connections  # noqa: E402
from django.utils import timezone  # noqa: E402

from nrllm_agents import store  # noqa: E402
from nrllm_agents.domain import Step, StepKind  # noqa: E402
from nrllm_agents.models import AgentRun, AgentRunEvent, Note  # noqa: E402
from nrllm_agents.store import retention  # noqa: E402

OWNER = "worker:bench:1"
SKELETON = (
    "count(*), sum(prompt_tokens), sum(completion_tokens), sum(cost), count(cancel_requested_at), max(finished_at)"
)


def fill(runs: int, steps: int) -> None:
    """``runs`` stopped runs, 100 to 200 days old, with ``steps`` steps each and a note per 10 runs."""
    run_table, step_table, note_table = (m._meta.db_table for m in (AgentRun, AgentRunEvent, Note))
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {run_table} (id, owner_id, status, termination_reason, prompt, provider, model, connection,
                tools, options, created_at, started_at, stopped_at, finished_at, claimed_by, attempts, iterations,
                prompt_tokens, completion_tokens, cost, cost_estimated, final_text, error_class, error_message,
                cancelled_by_name, cancel_source, cancel_reason, cancel_requested_at, tree_depth, tree_call_id,
                multitask_strategy, rolled_back, metadata, hidden_from_protocol)
            SELECT gen_random_uuid(), NULL, s.status, s.status, 'order #' || i || ': ' || repeat('private text ', 8),
                'scripted', 'm', '', '["calculator"]', '{{"system": "be terse", "max_iterations": 10}}',
                t, t, t + interval '2 s', t + interval '2 s', '', 0, 2, 120, 40, 0.0012, false,
                'the answer to order #' || i || ' is 42', '', '',
                CASE WHEN s.status = 'cancelled' THEN 'ops' ELSE '' END,
                CASE WHEN s.status = 'cancelled' THEN 'api' ELSE '' END,
                CASE WHEN s.status = 'cancelled' THEN 'runaway' ELSE '' END,
                CASE WHEN s.status = 'cancelled' THEN t + interval '1 s' END, 0, '', '', false, '{{}}', false
            FROM generate_series(1, %s) i,
                LATERAL (SELECT CASE WHEN i %% 10 = 0 THEN 'cancelled' ELSE 'completed' END AS status,
                                now() - interval '100 days' - (i %% 100000) * interval '1 minute' AS t) s
            """,
            [runs],
        )
        cursor.execute(
            f"""
            INSERT INTO {step_table} (run_id, sequence, kind, round, duration_ms, payload, created_at)
            SELECT r.id, n, CASE WHEN n %% 3 = 0 THEN 'request' WHEN n %% 3 = 1 THEN 'llm' ELSE 'tool' END, n / 3, 12.5,
                CASE WHEN n %% 3 = 0 THEN jsonb_build_object('provider', 'scripted', 'model', 'm', 'message_count', n,
                        'messages', jsonb_build_array(jsonb_build_object('role', 'user', 'content', r.prompt)))
                     WHEN n %% 3 = 1 THEN jsonb_build_object('content', r.final_text, 'tool_calls', '[]'::jsonb,
                        'finish_reason', 'stop', 'usage', '{{"prompt_tokens": 60, "completion_tokens": 20,
                        "total_tokens": 80, "cost": "0.0006"}}'::jsonb)
                     ELSE jsonb_build_object('call_id', 'c' || n, 'name', 'calculator',
                        'arguments', '{{"expression": "6*7"}}'::jsonb, 'result', 42, 'error', NULL) END,
                r.created_at + n * interval '10 ms'
            FROM {run_table} r, generate_series(0, %s - 1) n
            """,
            [steps],
        )
        cursor.execute(
            f"INSERT INTO {note_table} (run_id, title, body, created_at) "
            f"SELECT id, 'note', repeat('a private note ', 10), created_at FROM {run_table} WHERE prompt_tokens = 120 "
            "AND random() < 0.1"
        )
        cursor.execute(f"ANALYZE {run_table}; ANALYZE {step_table}; ANALYZE {note_table}")


def table_bytes() -> int:
    tables = [m._meta.db_table for m in (AgentRun, AgentRunEvent, Note)]
    with connection.cursor() as cursor:
        cursor.execute("SELECT sum(pg_total_relation_size(t)) FROM unnest(%s::text[]) t", [tables])
        return int(cursor.fetchone()[0])


def skeleton() -> tuple:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {SKELETON} FROM {AgentRun._meta.db_table} WHERE claimed_by = ''")
        runs = cursor.fetchone()
        cursor.execute(
            f"SELECT count(*), sum(duration_ms), count(*) FILTER (WHERE payload ? 'usage') "
            f"FROM {AgentRunEvent._meta.db_table} WHERE run_id IN "
            f"(SELECT id FROM {AgentRun._meta.db_table} WHERE claimed_by = '')"
        )
        return runs, cursor.fetchone()


def boundaries(run_id, first: int, count: int, until: threading.Event | None = None) -> list[float]:
    """Record boundaries on the running run; each one's commit time in ms. With ``until``: go on
    until it is set (at least ``count``)."""
    times = []
    sequence = first
    while len(times) < count or (until is not None and not until.is_set()):
        started = time.perf_counter()
        lease = store.record_step(run_id, OWNER, sequence, Step(StepKind.TOOL, 0, {"n": sequence}), timezone.now())
        times.append((time.perf_counter() - started) * 1000)
        assert lease is store.Lease.HELD, lease
        sequence += 1
    return times


def quantiles(times: list[float]) -> str:
    q = statistics.quantiles(times, n=100)
    return f"p50 {q[49]:6.2f} ms  p99 {q[98]:6.2f} ms  ({len(times)} boundaries)"


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def bench(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    fill(args.runs, args.steps)
    print(f"filled {args.runs:,} runs x {args.steps} steps in {time.perf_counter() - started:.0f} s (load {load()})")
    before_bytes, before_skeleton = table_bytes(), skeleton()
    runner = store.begin(
        {"prompt": "beside", "provider": "scripted"}, claimed_by=OWNER, lease_expires=store.lease_until()
    )

    quiet = boundaries(runner.pk, 0, args.boundaries)
    print(f"boundaries, nothing beside   : {quantiles(quiet)}  (load {load()})")

    done = threading.Event()
    report: list = []

    def purge() -> None:
        try:
            policy = retention.Policy(content_days=30, batch=args.batch)
            begun = time.perf_counter()
            report.append(retention.apply(policy))
            report.append(time.perf_counter() - begun)
        finally:
            done.set()
            connections.close_all()

    thread = threading.Thread(target=purge)
    thread.start()
    beside = boundaries(runner.pk, len(quiet), 100, until=done)  # for as long as the pass goes
    thread.join()
    result, seconds = report
    print(f"boundaries, beside the pass  : {quantiles(beside)}  (load {load()})")
    q_quiet, q_beside = statistics.quantiles(quiet, n=100), statistics.quantiles(beside, n=100)
    print(f"p99 beside / quiet           : {q_beside[98] / q_quiet[98]:.2f}x  (p50 {q_beside[49] / q_quiet[49]:.2f}x)")
    print(
        f"pass: {result.summary()} in {seconds:.1f} s, {result.batches} batches "
        f"({result.purged_runs / seconds:,.0f} runs/s)"
    )
    after_skeleton = skeleton()
    print(f"skeleton kept: {'yes' if after_skeleton == before_skeleton else 'NO'} {after_skeleton}")
    after_bytes = table_bytes()
    with connection.cursor() as cursor:
        tables = ", ".join(m._meta.db_table for m in (AgentRun, AgentRunEvent, Note))
        cursor.execute(f"VACUUM {tables}")
        vacuumed = table_bytes()
        cursor.execute(f"VACUUM FULL {tables}")
        full = table_bytes()
    mb = 1024 * 1024
    print(
        f"bytes (runs, steps, notes): before {before_bytes / mb:,.0f} MB, after the pass {after_bytes / mb:,.0f} MB, "
        f"after VACUUM {vacuumed / mb:,.0f} MB, after VACUUM FULL {full / mb:,.0f} MB "
        f"({full / before_bytes:.0%} of before)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000, help="stopped runs to fill (default 100000)")
    parser.add_argument("--steps", type=int, default=8, help="steps per run (default 8)")
    parser.add_argument("--batch", type=int, default=200, help="runs per retention batch (default 200)")
    parser.add_argument("--boundaries", type=int, default=2000, help="boundaries timed quiet (default 2000)")
    parser.add_argument("--database", default="nrllm_bench_retention", help="throwaway database to create and drop")
    args = parser.parse_args()
    settings.DEBUG = False
    if connection.vendor != "postgresql":
        raise SystemExit("bench/retention.py needs PostgreSQL (DATABASE_URL)")
    connection.settings_dict.setdefault("TEST", {})["NAME"] = args.database
    configured = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        bench(args)
    finally:
        connections.close_all()
        connection.creation.destroy_test_db(configured, verbosity=0)


if __name__ == "__main__":
    main()
