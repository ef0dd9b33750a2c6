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
    from nrllm_agents.runtime import AgentRuntime
    from tests.e2e.workers import Workers

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="1,2,4,8", help="worker process counts")
    parser.add_argument("--delays", default="0,10,100", help="step durations in ms")
    parser.add_argument("--window", type=float, default=6.0, help="seconds measured per cell")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/12", help="a Redis db of its own (flushed)")
    parser.add_argument("--database", default="nrllm_bench_scale", help="throwaway database to create and drop")
    parser.add_argument("--pgbouncer", action="store_true", help="also check what survives a PgBouncer")
    parser.add_argument("--pgbouncer-port", type=int, default=6439)
    args = parser.parse_args()
    production_settings()
    server_url = os.environ.get("DATABASE_URL", "")
    os.environ["REDIS_URL"] = args.redis_url

    import redis

    rows = []
    with throwaway_database(args.database) as url, tempfile.TemporaryDirectory() as logs:
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


if __name__ == "__main__":
    main()
