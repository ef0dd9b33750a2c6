"""The scale model: how many step boundaries one PostgreSQL absorbs, and what each one costs it.

For each number of ``rqworker`` processes (``--workers``, default 1 2 4 8) and each step
duration (``--delays`` in ms, default 0 10 100) it keeps the workers busy with runs of tool
rounds (a model turn of that duration, then a ``calculator`` call: three boundaries a round)
and, over a window of ``--window`` seconds, measures:

- boundaries per second: steps recorded in the window (each one boundary statement);
- PostgreSQL CPU per boundary: the CPU time (``/proc/<pid>/stat``, user + system) of every
  backend connected to the benchmark's database, sampled every 50 ms, divided by the
  boundaries (so it also carries each run's claim and settle, amortised);
- WAL bytes per boundary: the records of the benchmark's database only (``pg_walinspect``,
  so other databases on the same server do not count), full-page images included;
- the peak number of connections to the benchmark's database.

With ``--pgbouncer`` it also starts Debian's PgBouncer (``/usr/sbin/pgbouncer``) on a port of
its own in transaction mode and shows what survives it: our prepared statements (they need
PgBouncer >= 1.21 with ``max_prepared_statements``; otherwise ``NRLLM_PREPARED_STATEMENTS=0``),
unnamed server-side bound statements, and ``LISTEN`` (which does not survive it).

First, the database side alone, past what Python can drive on a small machine: ``pgbench -M
prepared`` runs the project's own boundary statement (``store.leases._RECORD_SQL``, each writer
renewing and appending to a running run of its own) on the migrated schema, at 1 to 64
concurrent writers (``--writers``), in four modes side by side (rotating within each writer
count): push off (the run table's triggers disabled), push on with nobody watching, push on with
every run watched (the boundary then returns a count above zero, and a second pgbench plays a
publisher per writer, as if each writer were a process of its own, sending
``deltas._NOTIFY_SQL`` at the publisher's bound, 50 notifying commits a second each, over 4
connections, ``synchronous_commit`` off as the publisher's connection has it, to a listener that
drains them), and migration 0008's trigger (a ``NOTIFY`` from every boundary, as before). It
prints boundary commits per second and the ratios to push off. ``--pgbench-only`` stops there.

``DATABASE_URL`` names the server (a throwaway database is created and dropped);
``--redis-url`` a Redis database that is **flushed**. Must run as a user that may read the
backends' ``/proc/<pid>/stat`` (the same user as PostgreSQL, or root).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/scale.py \\
        --redis-url redis://127.0.0.1:6379/12 --pgbouncer
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from step_overhead import production_settings, throwaway_database  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


class BackendCpu:
    """Samples the CPU time of every backend connected to one database until stopped."""

    def __init__(self, url: str, database: str) -> None:
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)
        self.database = database
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.peak_connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    @staticmethod
    def _cpu(pid: int) -> float | None:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime

    def _sample(self, *, baseline: bool = False) -> None:
        own = self.conn.info.backend_pid
        pids = [
            r[0]
            for r in self.conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND backend_type = 'client backend' AND pid <> %s",
                [self.database, own],
            )
        ]
        self.peak_connections = max(self.peak_connections, len(pids))
        for pid in pids:
            cpu = self._cpu(pid)
            if cpu is None:
                continue
            # A backend born during the window is charged from zero: connecting is part of the cost.
            self.first.setdefault(pid, cpu if baseline else 0.0)
            self.last[pid] = cpu

    def _loop(self) -> None:
        while not self._stop.wait(0.05):
            self._sample()

    def start(self) -> None:
        self._sample(baseline=True)
        self._thread.start()

    def stop(self) -> float:
        """Stop sampling; returns the CPU seconds the backends used since ``start``."""
        self._stop.set()
        self._thread.join()
        self._sample()
        self.conn.close()
        return sum(self.last[pid] - self.first[pid] for pid in self.last)


class WalMeter:
    """WAL written for one database between ``start`` and ``stop`` (``pg_walinspect``): the
    records touching its relations and the commit records of the same transactions, so
    other databases on the server do not count."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.url = url
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        self.begin = ""

    def _lsn(self) -> str:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            return str(conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0])

    def start(self) -> None:
        self.begin = self._lsn()

    def stop(self) -> int:
        import psycopg

        end = self._lsn()
        with psycopg.connect(self.url, autocommit=True) as conn:
            pattern = (
                "%/"
                + str(conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()[0])
                + "/%"
            )
            return int(
                conn.execute(
                    "WITH r AS (SELECT xid, record_length, block_ref "
                    "FROM pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn)), "
                    "ours AS (SELECT DISTINCT xid FROM r WHERE xid <> '0' AND block_ref LIKE %s) "
                    "SELECT coalesce(sum(record_length), 0) FROM r "
                    "WHERE block_ref LIKE %s OR xid IN (SELECT xid FROM ours)",
                    [self.begin, end, pattern, pattern],
                ).fetchone()[0]
            )


def script(rounds: int, delay_ms: int) -> list[dict[str, Any]]:
    turn = {"tool_calls": [{"name": "calculator", "arguments": {"expression": "6 * 7"}}]}
    if delay_ms:
        turn["delay"] = delay_ms / 1000
    return [turn] * rounds + [{"content": "done"}]


def measure_cell(
    url: str,
    database: str,
    redis_url: str,
    workers: int,
    delay_ms: int,
    window: float,
    logs: str,
    *,
    worker_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One cell of the matrix: ``workers`` rqworkers kept busy with steps of ``delay_ms``.

    ``worker_env`` overrides the workers' environment (e.g. a ``DATABASE_URL`` through PgBouncer).
    """
    import redis
    from django.utils import timezone

    from nrllm_agents.models import ACTIVE, AgentRun, AgentRunEvent
    from nrllm_agents.runtime.agent_runtime import AgentRuntime
    from tests.e2e.processes import Workers

    redis.Redis.from_url(redis_url).flushdb()
    rounds = 30
    run_seconds = rounds * max(delay_ms / 1000, 0.004)  # 4 ms: a generous guess at a zero-delay round
    runs = workers * (int((window + 4) / run_seconds) + 2)
    runtime = AgentRuntime()
    request = {
        "prompt": "scale",
        "tools": ["calculator"],
        "script": script(rounds, delay_ms),
        "max_iterations": rounds + 1,
    }
    env = {**os.environ, "DATABASE_URL": url, "REDIS_URL": redis_url, **(worker_env or {})}
    with Workers(env, count=workers, log_dir=logs):
        for _ in range(runs):
            runtime.enqueue(request)
        # Let every worker pick up work before the window opens.
        deadline = time.monotonic() + 30
        while AgentRun.objects.filter(status="running").count() < workers and time.monotonic() < deadline:
            time.sleep(0.05)
        cpu, wal_meter = BackendCpu(url, database), WalMeter(url)
        started = timezone.now()
        wal_meter.start()
        cpu.start()
        time.sleep(window)  # the measurement window itself
        seconds = cpu.stop()
        ended = timezone.now()
        wal = wal_meter.stop()
        boundaries = AgentRunEvent.objects.filter(created_at__gte=started, created_at__lt=ended).count()
        starved = AgentRun.objects.filter(status="queued").count() == 0
        failed = AgentRun.objects.filter(status="failed").count()
    runtime.cancel_many(AgentRun.objects.filter(status__in=[s.value for s in ACTIVE]), source="system")
    elapsed = (ended - started).total_seconds()
    return {
        "workers": workers,
        "delay_ms": delay_ms,
        "per_second": boundaries / elapsed,
        "cpu_us": seconds / max(1, boundaries) * 1e6,
        "pg_cpu_share": seconds / elapsed,
        "wal_bytes": wal / max(1, boundaries),
        "connections": cpu.peak_connections,
        "starved": starved,
        "failed": failed,
    }


def pgbouncer_check(
    server_url: str, url: str, database: str, port: int, redis_url: str, window: float, logs: str
) -> list[str]:
    """Start PgBouncer in transaction mode and report what goes through it: statements, LISTEN,
    and 4 workers (prepared statements off) sharing its 2 server connections."""
    import subprocess

    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    server = conninfo_to_dict(server_url)
    binary = "/usr/sbin/pgbouncer"
    if not Path(binary).exists():
        return ["PgBouncer: not installed (apt-get install -y pgbouncer); not checked"]
    version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    workdir = Path(tempfile.mkdtemp(prefix="nrllm-pgbouncer-"))
    os.chmod(workdir, 0o755)
    if os.geteuid() == 0:  # PgBouncer refuses to run as root: it runs as postgres, in a directory it owns
        import pwd

        os.chown(workdir, pwd.getpwnam("postgres").pw_uid, -1)
    ini = workdir / "pgbouncer.ini"
    users = workdir / "users.txt"
    users.write_text(f'"{server.get("user", "postgres")}" ""\n')
    ini.write_text(
        "[databases]\n"
        f"{database} = host={server.get('host', '127.0.0.1')} port={server.get('port', 5432)} dbname={database}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {users}\npool_mode = transaction\n"
        "default_pool_size = 2\nmax_client_conn = 100\n"
        f"logfile = {workdir / 'pgbouncer.log'}\npidfile = {workdir / 'pgbouncer.pid'}\n"
    )
    for path in (ini, users):
        os.chmod(path, 0o644)
    command = [binary, str(ini)] + (["-u", "postgres"] if os.geteuid() == 0 else [])
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    report = [f"PgBouncer: {version}, transaction mode, 2 server connections, port {port}"]
    try:
        via = f"host=127.0.0.1 port={port} dbname={database} user={server.get('user', 'postgres')}"
        deadline = time.monotonic() + 10
        while True:
            try:
                psycopg.connect(via, autocommit=True).close()
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    return report + ["  could not start PgBouncer here; not checked"]
                time.sleep(0.1)
        for prepare in (True, False):
            failures, total = _interleaved_statements(via, prepare)
            label = "prepared (NRLLM_PREPARED_STATEMENTS=1)" if prepare else "unnamed, server-side bound (=0)"
            report.append(f"  {label:42} {failures:4d} of {total} statements failed")
        direct = (
            f"host={server.get('host', '127.0.0.1')} port={server.get('port', 5432)} dbname={database} "
            f"user={server.get('user', 'postgres')}"
        )
        for name, listen_url in (("LISTEN through PgBouncer", via), ("LISTEN on a direct connection", direct)):
            report.append(f"  {name:42} notification {'received' if _listen_works(listen_url, direct) else 'LOST'}")
        user = server.get("user", "postgres")
        cell = measure_cell(
            url,
            database,
            redis_url,
            4,
            10,
            window,
            logs,
            worker_env={
                "DATABASE_URL": f"postgres://{user}@127.0.0.1:{port}/{database}",
                "NRLLM_PREPARED_STATEMENTS": "0",
            },
        )
        report.append(
            f"  4 workers through it (10 ms steps, NRLLM_PREPARED_STATEMENTS=0): {cell['per_second']:.0f} "
            f"boundaries/s, {cell['connections']} connections to the database "
            f"(PgBouncer's and the bench's own), {cell['failed']} runs failed"
        )
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)
    return report


def _interleaved_statements(url: str, prepare: bool) -> tuple[int, int]:
    """Four clients take turns sending the same statement, as four workers' boundaries would."""
    import psycopg

    clients = [psycopg.connect(url, autocommit=True, prepare_threshold=0 if prepare else None) for _ in range(4)]
    failures = total = 0
    try:
        for i in range(200):
            client = clients[i % 4]
            total += 1
            try:
                client.execute(
                    "SELECT count(*) FROM nrllm_agents_agentrun WHERE id = %s",
                    ["00000000-0000-0000-0000-000000000000"],
                    prepare=prepare,
                )
            except psycopg.Error:
                failures += 1
                client.rollback()
    finally:
        for client in clients:
            client.close()
    return failures, total


def _listen_works(listen_url: str, notify_url: str) -> bool:
    import psycopg

    with (
        psycopg.connect(listen_url, autocommit=True) as listener,
        psycopg.connect(notify_url, autocommit=True) as other,
    ):
        listener.execute("LISTEN nrllm_bench")
        # Another client's transaction takes the listener's server connection in between.
        with psycopg.connect(listen_url, autocommit=True) as neighbour:
            neighbour.execute("SELECT 1")
        other.execute("NOTIFY nrllm_bench, 'x'")
        return any(True for _ in listener.notifies(timeout=1.0, stop_after=1))


# --- the database side alone: pgbench running the project's boundary statement ------------------
MODES = ("off", "on, nobody watches", "on, every run watched", "0008: NOTIFY per step")
PUBLISHER_RATE = 50  # notifying commits per second per process at most (PUSH_INTERVAL_SECONDS = 0.02)
PUBLISHER_CLIENTS = 4  # connections sending them (the rate is what counts; max_connections is 100 here)


def bench_run_id(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


def boundary_script() -> str:
    """The project's boundary statement (``store.leases._RECORD_SQL``) as a pgbench script:
    client ``i`` renews and appends to run ``i`` (its own row, as a segment does)."""
    from nrllm_agents.store.leases import _RECORD_SQL

    values = [
        "now() + interval '300 seconds'",  # lease_expires
        "('00000000-0000-4000-8000-' || lpad((:client_id + 1)::text, 12, '0'))::uuid",  # id
        "'running'",
        "'bench'",  # claimed_by
        "nextval('nrllm_bench_sequence')",  # sequence: unique per run as a segment's is
        "'tool'",
        "0",
        "1",
        """'{"name": "calculator", "result": "2"}'""",
        "now()",
    ]
    sql = _RECORD_SQL.replace("%s::jsonb", "%s")
    for value in values:
        sql = sql.replace("%s", value, 1)
    assert "%s" not in sql
    return sql + ";\n"


def publisher_script() -> str:
    """One publisher's notifying commit (``deltas._NOTIFY_SQL``), for client ``i``'s run."""
    from nrllm_agents.live.deltas import _NOTIFY_SQL

    channel = "'nrllm_run_00000000000040008000' || lpad((:client_id + 1)::text, 12, '0')"
    payload = "('00000000-0000-4000-8000-' || lpad((:client_id + 1)::text, 12, '0')) || ':1'"
    sql = _NOTIFY_SQL.replace("%s::text[]", f"ARRAY[{channel}]", 1).replace("%s::text[]", f"ARRAY[{payload}]", 1)
    return sql + ";\n"


OLD_STEP_TRIGGER = """
CREATE OR REPLACE FUNCTION nrllm_bench_notify_step() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('nrllm_step', NEW.run_id::text || ':' || NEW.sequence::text);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER nrllm_bench_notify_step AFTER INSERT ON nrllm_agents_agentrunevent
    FOR EACH ROW EXECUTE FUNCTION nrllm_bench_notify_step();
"""


def pgbench_boundaries(
    url: str, writers: list[int], seconds: float, workdir: str, repeats: int = 3
) -> list[dict[str, Any]]:
    """Boundary commits per second at each number of concurrent writers, in each mode, side by
    side (the modes rotate within each writer count, ``repeats`` times; the median is kept)."""
    import subprocess

    import psycopg

    pgbench = shutil.which("pgbench")
    if pgbench is None:
        sys.exit("pgbench is needed for the database-side bench (Debian: postgresql-client)")
    most = max(writers)
    scripts = Path(workdir)
    (scripts / "boundary.sql").write_text(boundary_script())
    (scripts / "publish.sql").write_text(publisher_script())
    admin = psycopg.connect(url, autocommit=True)
    admin.execute("CREATE SEQUENCE IF NOT EXISTS nrllm_bench_sequence")
    admin.execute(OLD_STEP_TRIGGER)
    admin.execute("ALTER TABLE nrllm_agents_agentrunevent DISABLE TRIGGER nrllm_bench_notify_step")
    from django.db import connection

    from nrllm_agents.models import AgentRun, RunStatus
    from nrllm_agents.store import lease_until

    AgentRun.objects.bulk_create(
        AgentRun(
            id=bench_run_id(n), status=RunStatus.RUNNING, claimed_by="bench", lease_expires=lease_until(), prompt="p"
        )
        for n in range(1, most + 1)
    )
    connection.close()
    # A process that watches every run, draining what it receives (as a hub would).
    ear = psycopg.connect(url, autocommit=True)
    ear.execute("; ".join(f"LISTEN nrllm_run_{bench_run_id(n).replace('-', '')}" for n in range(1, most + 1)))
    ear.execute("LISTEN nrllm_step")
    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set():
            for _ in ear.notifies(timeout=0.2):
                pass

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()

    def configure(mode: str) -> None:
        old = mode.startswith("0008")
        admin.execute(
            f"ALTER TABLE nrllm_agents_agentrunevent {'ENABLE' if old else 'DISABLE'} TRIGGER nrllm_bench_notify_step"
        )
        admin.execute(f"ALTER TABLE nrllm_agents_agentrun {'DISABLE' if mode == 'off' else 'ENABLE'} TRIGGER USER")
        admin.execute("UPDATE nrllm_agents_agentrun SET watchers = %s", [1 if "every run" in mode else 0])
        admin.execute("VACUUM nrllm_agents_agentrun")

    def run_pgbench(script: str, clients: int, rate: int | None) -> subprocess.Popen[str]:
        seconds_arg = str(max(1, round(seconds)))
        command = [pgbench, "-n", "-M", "prepared", "-c", str(clients), "-j", str(min(clients, 4)), "-T", seconds_arg]
        if rate:
            command += ["-R", str(rate)]
        env = dict(os.environ)
        if script == "publish.sql":  # as the publisher's connection (deltas.py)
            env["PGOPTIONS"] = "-c synchronous_commit=off"
        return subprocess.Popen(
            [*command, "-f", str(scripts / script), url],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )

    def tps(output: str) -> float:
        for line in output.splitlines():
            if line.startswith("tps = "):
                return float(line.split()[2])
        raise RuntimeError(f"pgbench failed:\n{output}")

    rows = []
    try:
        for i, clients in enumerate(writers):
            measured: dict[str, list[float]] = {}
            for repeat in range(repeats):
                shift = (i + repeat) % len(MODES)
                for mode in MODES[shift:] + MODES[:shift]:
                    configure(mode)
                    publishers = (
                        run_pgbench("publish.sql", min(clients, PUBLISHER_CLIENTS), clients * PUBLISHER_RATE)
                        if "every run" in mode
                        else None
                    )
                    out, _ = run_pgbench("boundary.sql", clients, None).communicate()
                    measured.setdefault(mode, []).append(tps(out))
                    if publishers is not None:
                        pub_out, _ = publishers.communicate()
                        measured.setdefault("notifying commits/s", []).append(tps(pub_out))
            row: dict[str, Any] = {"writers": clients, **{k: statistics.median(v) for k, v in measured.items()}}
            rows.append(row)
            print(
                f"  pgbench {clients} writers: " + ", ".join(f"{m} {row[m]:.0f}" for m in MODES) + " boundaries/s",
                flush=True,
            )
    finally:
        stop.set()
        drainer.join(2)
        ear.close()
        admin.close()
    return rows


def print_pgbench(rows: list[dict[str, Any]], seconds: float) -> None:
    print(
        f"scale (database side): pgbench -M prepared running the boundary statement, each writer on a run of its "
        f"own, {seconds:g} s per cell, median of the repeats; 'every run watched' adds a publisher per writer at "
        f"{PUBLISHER_RATE} notifying commits/s (the rate bound; sent over {PUBLISHER_CLIENTS} connections) "
        f"and a listener draining them"
    )
    print(
        f"  {'writers':>7} {'push off':>9} {'on, none watched':>17} {'on, all watched':>16} {'0008 per step':>14}"
        f"  {'on/off (watched)':>16} {'0008/off':>9}  {'publisher commits/s':>19}"
    )
    for r in rows:
        off = r["off"]
        print(
            f"  {r['writers']:7d} {off:9.0f} {r[MODES[1]]:17.0f} {r[MODES[2]]:16.0f} {r[MODES[3]]:14.0f}"
            f"  {r[MODES[2]] / off:15.2f}x {r[MODES[3]] / off:8.2f}x  {r.get('notifying commits/s', 0):19.0f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="1,2,4,8", help="worker process counts")
    parser.add_argument("--delays", default="0,10,100", help="step durations in ms")
    parser.add_argument("--window", type=float, default=6.0, help="seconds measured per cell")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/12", help="a Redis db of its own (flushed)")
    parser.add_argument("--database", default="nrllm_bench_scale", help="throwaway database to create and drop")
    parser.add_argument("--pgbouncer", action="store_true", help="also check what survives a PgBouncer")
    parser.add_argument("--pgbouncer-port", type=int, default=6439)
    parser.add_argument("--writers", default="1,2,4,8,16,32,64", help="pgbench writers (the database side)")
    parser.add_argument("--pgbench-seconds", type=float, default=4.0, help="seconds per pgbench cell")
    parser.add_argument("--pgbench-repeats", type=int, default=3, help="rotations per writer count (median kept)")
    parser.add_argument("--pgbench-only", action="store_true", help="only the database side (no worker processes)")
    args = parser.parse_args()
    production_settings()
    server_url = os.environ.get("DATABASE_URL", "")
    os.environ["REDIS_URL"] = args.redis_url

    import redis

    rows = []
    with throwaway_database(args.database) as url, tempfile.TemporaryDirectory() as logs:
        database_side = pgbench_boundaries(
            url, [int(w) for w in args.writers.split(",")], args.pgbench_seconds, logs, args.pgbench_repeats
        )
        if args.pgbench_only:
            print_pgbench(database_side, args.pgbench_seconds)
            return
        for workers in [int(w) for w in args.workers.split(",")]:
            for delay in [int(d) for d in args.delays.split(",")]:
                row = measure_cell(url, args.database, args.redis_url, workers, delay, args.window, logs)
                rows.append(row)
                print(f"  measured {workers} workers x {delay} ms: {row['per_second']:.0f} boundaries/s", flush=True)
        bouncer = (
            pgbouncer_check(server_url, url, args.database, args.pgbouncer_port, args.redis_url, args.window, logs)
            if args.pgbouncer
            else []
        )
    redis.Redis.from_url(args.redis_url).flushdb()
    cpus = os.cpu_count()
    print(f"scale: {cpus} cores shared by the workers, PostgreSQL and whatever else runs; {args.window:g} s per cell")
    print(
        f"  {'workers':>7} {'step ms':>7} {'boundaries/s':>13} {'PG CPU us/boundary':>19} {'PG cores busy':>14} "
        f"{'WAL B/boundary':>15} {'connections':>12}"
    )
    for r in rows:
        print(
            f"  {r['workers']:7d} {r['delay_ms']:7d} {r['per_second']:13.0f} {r['cpu_us']:19.0f} "
            f"{r['pg_cpu_share']:14.2f} {r['wal_bytes']:15.0f} {r['connections']:12d}"
            f"{'   (queue ran dry)' if r['starved'] else ''}"
        )
    for line in bouncer:
        print(line)
    print_pgbench(database_side, args.pgbench_seconds)


if __name__ == "__main__":
    main()
