"""The kill matrix (issue 47): real workers of both kinds, three kinds of effect, three kill points,
``RUNS`` runs in each cell, each run's worker process killed once (``SIGKILL``) at the point the
test chose, by a hook in the test's tool (``nrllm_agents.testing.kill_matrix``), never a sleep.

What must hold, read from the database and from the witness outside it (a loopback API that
counts requests, ``keyed_server``):
- the transactional ORM write: exactly one row per run, and every run completed;
- the idempotent external call: every repetition carries the same key, one effect per run;
- the non-idempotent external call: never made twice without a person's decision; every run lost
  in its window (before or after the effect, before its step) waits in doubt; each is then
  resolved, in turn, by each of the three decisions.

``NRLLM_KILL_MATRIX_RUNS`` sets the runs per cell (CI's default is small; the acceptance figure is
100: ``bench/README.md``).
"""

from __future__ import annotations

import itertools
import os
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from nrllm_agents.models import AgentRun, Note, RunStatus
from nrllm_agents.runtime.agent_runtime import AgentRuntime
from nrllm_agents.testing import kill_matrix
from nrllm_agents.testing.keyed_server import KeyedServer
from tests.e2e.processes import Workers, WorkerStartError, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

RUNS = int(os.environ.get("NRLLM_KILL_MATRIX_RUNS", "2"))  # 4 runs in doubt: each decision taken
KINDS = ("ledger", "keyed_charge", "plain_charge")


@pytest.fixture
def witness():
    with KeyedServer() as api:
        yield api


@pytest.fixture
def matrix_env(child_env, redis_url, settings, tmp_path, witness) -> dict[str, str]:
    """The workers' environment (and this process's settings): the matrix's tools, a short lease,
    and a maintenance pass (the reaper, the queued sweep) every second, so a lost run is recovered
    at once."""
    import django_rq

    settings.REDIS_URL = redis_url
    settings.RQ_QUEUES = {"default": {"URL": redis_url}}
    settings.NRLLM_AGENTS = {
        **settings.NRLLM_AGENTS,
        "TOOLS": {**settings.NRLLM_AGENTS.get("TOOLS", {}), **kill_matrix.TOOLS},
    }
    django_rq.get_queue("default").empty()
    plan = tmp_path / "plan"
    plan.mkdir()
    return {
        **child_env,
        "REDIS_URL": redis_url,
        "NRLLM_LEASE_SECONDS": "3",
        "NRLLM_MAINTENANCE_SECONDS": "1",
        "NRLLM_QUEUED_STALE_SECONDS": "2",  # a dead worker's job (a retry nobody schedules) is found soon
        "NRLLM_EXTRA_TOOLS": ",".join(f"{k}={v}" for k, v in kill_matrix.TOOLS.items()),
        kill_matrix.PLAN: str(plan),
        kill_matrix.WITNESS: witness.url,
    }


def enqueue_matrix(runtime: AgentRuntime, plan: Path) -> dict[Any, tuple[str, str]]:
    """Every cell's runs, each with its kill point in the plan; ``{run id: (kind, point)}``."""
    cells: dict[Any, tuple[str, str]] = {}
    for kind, point in itertools.product(KINDS, kill_matrix.POINTS):
        for _ in range(RUNS):
            script = [{"tool_calls": [{"name": kind, "arguments": {}}]}, {"content": "done"}]
            run_id = runtime.enqueue({"prompt": f"{kind} {point}", "tools": [kind], "script": script})
            (plan / str(run_id)).write_text(point)
            cells[run_id] = (kind, point)
    return cells


def settled(run_ids: Any) -> bool:
    """Every run completed, cancelled, or waiting (in doubt: nothing more happens to it)."""
    return (
        not AgentRun.objects.filter(pk__in=list(run_ids))
        .exclude(status__in=[RunStatus.COMPLETED, RunStatus.CANCELLED, RunStatus.WAITING_FOR_APPROVAL])
        .exists()
    )


def explain(cells: dict[Any, tuple[str, str]], workers: list[Workers]) -> str:
    """What a failed wait reports: each unsettled run's cell and status, and the last log."""
    runs = AgentRun.objects.filter(pk__in=list(cells)).values_list("pk", "status", "attempts", "termination_reason")
    found = defaultdict(list)
    for pk, status, attempts, reason in runs:
        found[status].append((cells[pk], attempts, reason))
    return f"{dict(found)}\n{workers[-1].logs()[-4000:] if workers else ''}"


def requests_of(witness: KeyedServer, run_id: Any) -> list[tuple[str | None, str]]:
    return [(key, path) for key, path, body in list(witness.requests) if (body or {}).get("run") == str(run_id)]


@pytest.mark.parametrize("command", ["rqworker", "agent_worker"])
def test_every_effect_once_or_in_doubt_when_workers_are_killed_mid_call(
    runtime, matrix_env, witness, tmp_path, command
):
    cells = enqueue_matrix(runtime, Path(matrix_env[kill_matrix.PLAN]))
    workers: list[Workers] = []

    # One run at a time per agent_worker process: its SIGKILL takes that run alone, as a work horse's
    # does (a process of many runs loses them all: each is recovered alike, but the cells blur).
    extra = ("--concurrency", "1") if command == "agent_worker" else ()

    def start() -> None:
        logs = tmp_path / f"logs-{len(workers)}"
        started = Workers(matrix_env, count=2, log_dir=logs, command=command, extra_args=extra)
        workers.append(started)
        try:
            started.start()
        except WorkerStartError as exc:  # its first run killed it before it was seen registered
            assert "exited with -9" in str(exc), exc  # (SIGKILL: the plan's); the next look replaces it

    def supervised() -> bool:
        """A worker killed with its runs is replaced (a supervisor's job); true once all settled."""
        alive = [p for w in workers for p in w.processes if p.poll() is None]
        if len(alive) < 2:
            start()
        return settled(cells)

    start()
    try:
        wait_for(
            supervised,
            timeout=60 + 20 * RUNS * len(cells) ** 0.5,
            interval=0.5,
            what="every run to settle",
            explain=lambda: explain(cells, workers),
        )
        runs = {r.pk: r for r in AgentRun.objects.filter(pk__in=list(cells))}
        killed = sum(1 for run_id in cells if Path(f"{matrix_env[kill_matrix.PLAN]}/{run_id}.killed").exists())
        assert killed == len(cells), f"{killed} of {len(cells)} runs were killed once"
        doubts: list[Any] = []
        for run_id, (kind, point) in cells.items():
            run, asked = runs[run_id], requests_of(witness, run_id)
            if kind == "ledger":
                assert run.status == RunStatus.COMPLETED, (kind, point, run.status)
                assert Note.objects.filter(run_id=run_id).count() == 1, (kind, point)
            elif kind == "keyed_charge":
                assert run.status == RunStatus.COMPLETED, (kind, point, run.status)
                assert len({key for key, _ in asked}) == 1 and asked[0][0], (point, asked)  # one key, repeated
                assert sum(1 for e in witness.effects if e["body"]["run"] == str(run_id)) == 1
            elif point == "after_record":
                assert run.status == RunStatus.COMPLETED and len(asked) == 1, (point, run.status, asked)
            else:  # lost in the window: in doubt, the call not made again
                assert run.status == RunStatus.WAITING_FOR_APPROVAL, (point, run.status)
                assert run.suspended_state["in_doubt"]["call"]["name"] == "plain_charge"
                assert len(asked) == (1 if point == "after_effect" else 0), (point, asked)
                doubts.append(run_id)
        # Each run in doubt is resolved, by each decision in turn.
        decisions = itertools.cycle(["happened", "not_happened", "cancel"])
        decided = {run_id: next(decisions) for run_id in doubts}
        for run_id, decision in decided.items():
            if decision == "cancel":
                runtime.cancel(run_id, source="api", reason="refunded by hand")
            else:
                runtime.resolve(run_id, decision == "happened", result={"seen": True}, queued=True, reason="checked")
        wait_for(
            lambda: (
                supervised()
                and not AgentRun.objects.filter(pk__in=doubts, status=RunStatus.WAITING_FOR_APPROVAL).exists()
            ),
            timeout=60 + 10 * len(doubts),
            interval=0.5,
            what="every decided run to end",
        )
        for run_id, decision in decided.items():
            run, asked = AgentRun.objects.get(pk=run_id), requests_of(witness, run_id)
            before = 1 if cells[run_id][1] == "after_effect" else 0
            if decision == "cancel":
                assert run.status == RunStatus.CANCELLED and len(asked) == before
            else:
                assert run.status == RunStatus.COMPLETED, (decision, run.status)
                assert len(asked) == before + (decision == "not_happened"), (decision, asked)  # made again only then
        print(f"{command}: {len(cells)} runs killed once; in doubt {len(doubts)}: {dict(Counter(decided.values()))}")
    finally:
        for w in workers:
            w.stop()
