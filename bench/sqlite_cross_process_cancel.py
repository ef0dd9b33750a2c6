"""On SQLite, how long a cancel committed by another process takes to stop a run executing
in-process (issue 48: "within milliseconds" held in one process, not across processes).

Each round starts ``manage.py agent_run`` (the run executes in that process, on the in-process
executor) on a script whose model call streams for 60 s, waits until its model call is in
flight, then cancels it from this process (another process: nothing reaches the runner but its
poll of the database, ``NRLLM_CANCEL_POLL_SECONDS``) and reads ``stopped_at −
cancel_requested_at`` from the row. Then the poll's own cost: the one query it runs, timed here.
No assertions; it prints p50, p99 and max over ``--rounds`` per poll interval (``--polls``)::

    .venv/bin/python bench/sqlite_cross_process_cancel.py --rounds 20 --polls 1.0,0.05
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--polls", default="1.0,0.05", help="NRLLM_CANCEL_POLL_SECONDS values, comma-separated")
    parser.add_argument("--only", default="", help="run only the scenarios whose name contains this")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="nrllm-bench-sqlite-"))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "NRLLM_", "REDIS"))},
        "DATABASE_URL": f"sqlite:///{folder / 'bench.sqlite3'}",
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DJANGO_DEBUG": "1",
        "NRLLM_ALLOW_SCRIPTED": "1",
    }
    os.environ.update(env)
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run([*manage, "migrate", "-v0"], env=env, check=True)

    import django

    django.setup()
    from nrllm_agents.models import AgentRun
    from nrllm_agents.runtime.agent_runtime import AgentRuntime

    scenarios = {  # what is in flight when the cancel commits, and the event that says so
        "model call streaming": ([{"delay": 60, "content": "word " * 600}], [], "delta"),
        "tool sleeping": (
            [{"tool_calls": [{"name": "sleep", "arguments": {"seconds": 25}}]}, {"content": "x"}],
            ["--tool", "sleep"],
            "step",
        ),
    }
    for (name, (turns, tools, in_flight)), poll in [
        (s, float(p)) for s in scenarios.items() for p in args.polls.split(",") if args.only in s[0]
    ]:
        script = json.dumps(turns)
        latencies = []
        for _ in range(args.rounds):
            runner = subprocess.Popen(
                [*manage, "agent_run", "bench", "--script", script, "--json", *tools],
                env={**env, "NRLLM_CANCEL_POLL_SECONDS": str(poll)},
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            assert runner.stdout is not None
            run_id = None
            for line in runner.stdout:
                event = json.loads(line)
                if event.get("event") == "started":
                    run_id = event["run_id"]
                if run_id and event.get("event") == in_flight and event.get("step", {}).get("kind") != "request":
                    break  # the model call is streaming, or its turn is recorded and the tool runs
            time.sleep(0.3)  # somewhere inside a poll interval, not at its start
            cancelled = AgentRuntime().cancel(run_id, source="api", reason="bench")
            assert cancelled.outcome == "cancelled", (name, cancelled)
            runner.communicate(timeout=120)
            row = AgentRun.objects.get(pk=run_id)
            latencies.append((row.stopped_at - row.cancel_requested_at).total_seconds() * 1000)
        latencies.sort()
        p99 = latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))]
        print(
            f"{name}, poll {poll:g} s: cancel COMMIT -> stopped_at over {len(latencies)} rounds: "
            f"p50 {statistics.median(latencies):.0f} ms, p99 {p99:.0f} ms, max {latencies[-1]:.0f} ms"
        )

    # the poll's cost: the one query a process runs per interval for the runs it executes
    from django.db import connections

    from nrllm_agents.live.interrupts import watcher

    ids = list(AgentRun.objects.values_list("pk", flat=True)[:8])
    rounds = 2000
    began = time.perf_counter()
    for _ in range(rounds):  # what CancelWatcher._poll does: one query, then the connection closed
        watcher._confirmed_by_orm(ids)
        connections["default"].close()
    each = (time.perf_counter() - began) / rounds
    print(f"one poll (8 runs watched): {each * 1e6:.0f} µs; at 0.05 s: {each / 0.05:.2%} of a core while runs execute")


if __name__ == "__main__":
    main()
