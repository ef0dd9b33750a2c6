"""What one cancel costs: ``store.cancel`` against the guarded-UPDATE floor (and DBOS, if present).

For each sample it cancels a fresh queued run three ways, right beside each other, in an
order that rotates from sample to sample:

- ``store.cancel``: on PostgreSQL one prepared statement that locks the row, checks its
  status, stamps the cancel after the lock, moves the row and appends the ``cancelled`` step,
  returning the status it found (what every surface calls);
- the previous fence, for reference: ``BEGIN; SELECT ... FOR UPDATE; UPDATE; SELECT MAX;
  SELECT; INSERT; COMMIT`` through the ORM (what ``store.cancel`` still runs on SQLite);
- the floor: one guarded ``UPDATE ... WHERE id = $1 AND status IN (active)`` sent with raw
  psycopg, prepared, on a connection of its own; it neither locks first, nor reports what it
  found, nor appends a step.

With ``--dbos-python PATH`` (a Python whose environment has ``dbos`` installed, e.g. a venv
beside the project) it also times DBOS's ``DBOS.cancel_workflow`` on enqueued workflows in
batches interleaved with ours (``bench/dbos_cancel_peer.py``; its system database is another
throwaway database on the same server).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/cancel_op.py \\
        [--dbos-python .venv-dbos/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_overhead import production_settings, summary, throwaway_database  # noqa: E402  (bench/ is this script's directory)


class DbosPeer:
    """DBOS's cancel in a process of its own (another virtualenv), driven batch by batch."""

    def __init__(self, python: str, server_url: str, database: str, count: int) -> None:
        import psycopg

        self.server_url, self.database = server_url, database
        with psycopg.connect(server_url, dbname="postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{database}"')
        url = psycopg.conninfo.make_conninfo(server_url, dbname=database)
        params = psycopg.conninfo.conninfo_to_dict(url)
        sqlalchemy_url = (
            f"postgresql://{params.get('user', 'postgres')}@{params.get('host', '127.0.0.1')}:"
            f"{params.get('port', 5432)}/{database}"
        )
        self.proc = subprocess.Popen(
            [python, str(Path(__file__).with_name("dbos_cancel_peer.py")), sqlalchemy_url, str(count)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"the DBOS peer did not start: {line!r}")

    def cancel(self, count: int) -> list[float]:
        self.proc.stdin.write(f"cancel {count}\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        import psycopg

        if self.proc.poll() is None:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(60)
        with psycopg.connect(self.server_url, dbname="postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=600, help="cancels timed per contender")
    parser.add_argument("--batch", type=int, default=50, help="samples per batch (DBOS is interleaved by batch)")
    parser.add_argument("--dbos-python", default="", help="a Python with dbos installed, to time DBOS beside us")
    parser.add_argument("--database", default="nrllm_bench_cancel_op", help="throwaway database to create and drop")
    args = parser.parse_args()
    production_settings()
    server_url = os.environ.get("DATABASE_URL", "")

    with throwaway_database(args.database) as url:
        import psycopg
        from django.db import connection

        from nrllm_agents import store
        from nrllm_agents.models import ACTIVE, AgentRun, CancelSource, RunStatus
        from nrllm_agents.runtime.agent_runtime import AgentRuntime
        from nrllm_agents.store import prepared

        n = args.samples + 30  # 30 to warm up
        runs = AgentRun.objects.bulk_create(
            [
                AgentRun(status=RunStatus.QUEUED, prompt="cancel me", provider="scripted", request_payload={"x": 1})
                for _ in range(3 * n)
            ]
            + [
                AgentRun(
                    status=RunStatus.RUNNING,
                    prompt="cancel me",
                    provider="scripted",
                    claimed_by="bench",
                    lease_expires=store.lease_until(),
                )
                for _ in range(2 * n)
            ]
        )
        ids = [r.pk for r in runs]
        ours, legacy, floor_ids = ids[:n], ids[n : 2 * n], ids[2 * n : 3 * n]
        running_ours, running_floor = ids[3 * n : 4 * n], ids[4 * n :]
        runtime = AgentRuntime()
        raw = psycopg.connect(url, autocommit=True)
        active = ", ".join(f"'{s.value}'" for s in sorted(ACTIVE))
        floor_sql = (
            f"UPDATE {AgentRun._meta.db_table} SET status = 'cancelled', termination_reason = 'cancelled', "
            f"cancel_source = 'system', cancel_reason = '', cancel_requested_at = statement_timestamp(), "
            f"finished_at = statement_timestamp(), stopped_at = statement_timestamp(), request_payload = NULL "
            f"WHERE id = %s AND status IN ({active})"
        )

        def do_ours(run_id: uuid.UUID) -> None:
            assert store.cancel(run_id, source=CancelSource.SYSTEM).applied

        def do_legacy(run_id: uuid.UUID) -> None:
            enabled = prepared.enabled
            prepared.enabled = lambda: False  # type: ignore[assignment]  # the fence path, as on SQLite
            try:
                assert store.cancel(run_id, source=CancelSource.SYSTEM).applied
            finally:
                prepared.enabled = enabled  # type: ignore[assignment]

        def do_floor(run_id: uuid.UUID) -> None:
            with raw.cursor() as cur:
                cur.execute(floor_sql, [run_id], prepare=True)
                assert cur.rowcount == 1

        def do_runtime(run_id: uuid.UUID) -> None:
            assert runtime.cancel(run_id, source=CancelSource.SYSTEM).outcome == "cancelled"

        contenders: list[tuple[str, Callable[[uuid.UUID], None], list[uuid.UUID]]] = [
            ("store.cancel (one statement)", do_ours, ours),
            ("previous fence (ORM, 7 round trips)", do_legacy, legacy),
            ("floor: guarded UPDATE, raw, prepared", do_floor, floor_ids),
            ("AgentRuntime.cancel, running run", do_runtime, running_ours),
            ("floor: guarded UPDATE, running run", do_floor, running_floor),
        ]
        samples: dict[str, list[float]] = {name: [] for name, _, _ in contenders}
        peer = DbosPeer(args.dbos_python, server_url, args.database + "_dbos", n) if args.dbos_python else None
        dbos: list[float] = []
        try:
            done = 0
            for i in range(n):
                shift = i % len(contenders)
                for name, fn, pool in contenders[shift:] + contenders[:shift]:
                    t0 = time.perf_counter()
                    fn(pool[i])
                    if i >= 30:
                        samples[name].append(time.perf_counter() - t0)
                if peer is not None and (i + 1) % args.batch == 0 or i == n - 1:
                    if peer is not None:
                        timings = peer.cancel(i + 1 - done)
                        dbos.extend(timings if done else timings[30:])
                    done = i + 1
        finally:
            raw.close()
            if peer is not None:
                peer.close()
        connection.ensure_connection()
        version = connection.connection.info.server_version
        print(
            f"cancel_op: PostgreSQL {version // 10000}.{version % 10000}, {args.samples} cancels of queued runs per "
            f"contender, interleaved, DEBUG off"
        )
        print(f"  {'':40} {'mean':>8} {'p50':>8} {'p99':>8}   ms   x queued floor (p50)")
        floor = summary(samples[contenders[2][0]])
        rows: list[tuple[str, dict[str, float]]] = [(name, summary(samples[name])) for name, _, _ in contenders]
        if dbos:
            rows.append(("DBOS cancel_workflow (enqueued)", summary(dbos)))
        for name, s in rows:
            print(f"  {name:40} {s['mean']:8.3f} {s['p50']:8.3f} {s['p99']:8.3f}   {s['p50'] / floor['p50']:6.2f}x")
        running, running_floor_s = summary(samples[contenders[3][0]]), summary(samples[contenders[4][0]])
        print(
            f"  AgentRuntime.cancel of a running run (store, signal, metrics, log) / its guarded UPDATE: "
            f"{running['p50'] / running_floor_s['p50']:.2f}x at p50, "
            f"{running['mean'] / running_floor_s['mean']:.2f}x mean"
        )
        if not dbos:
            print("  DBOS: not timed (pass --dbos-python with a Python that has dbos installed)")


if __name__ == "__main__":
    main()
