"""A boundary statement that fails on its own never weakens the guard.

Guards what once broke: when the boundary's guarded statement failed with the connection
alive (a statement or lock timeout, a deadlock, ``pg_cancel_backend``), the step was appended
WITHOUT the ownership and cancel guard and the loop went on, starting model calls and tools up
to 185 ms after the cancel had committed.

- deterministic: the boundary right after a cancel fails every time it is tried (PostgreSQL
  and SQLite); the signal is switched off, so only the guard can stop the run;
- real: ``pg_cancel_backend`` fired again and again at the connections of executing segments
  while they are cancelled at random moments (PostgreSQL).

``transaction=True``: segments, the storm and the cancels each use their own connection.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from pathlib import Path

import pytest
from django.db import OperationalError, connection

from nrllm_agents import store
from nrllm_agents.live import interrupts
from nrllm_agents.models import AgentRun, AgentRunEvent, CancelSource, RunStatus
from nrllm_agents.runtime import segment
from nrllm_agents.runtime.agent_runtime import AgentRuntime

pytestmark = pytest.mark.django_db(transaction=True)

ROUNDS = 8
RUNS_PER_ROUND = 6
SCRIPT = [{"delay": 0.004, "tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}]}] * 60
SCRIPT = [*SCRIPT, {"content": "done"}]


@pytest.mark.parametrize("attempt", range(5))
def test_a_boundary_that_keeps_failing_after_a_cancel_writes_guarded_and_starts_nothing(attempt, tmp_path, monkeypatch):
    journal_path = tmp_path / "journal.jsonl"
    monkeypatch.setenv("NRLLM_CALL_JOURNAL", str(journal_path))
    monkeypatch.setattr(interrupts.watcher, "watch", lambda run_id, token, **kw: lambda: None)  # no signal
    runtime = AgentRuntime()
    cancel_at_step = 3 + attempt  # request, llm, tool, request, ... : every kind of boundary
    state = {"seen": 0, "faults": 0, "cancelled_at": None}

    def on_step(step: dict) -> None:  # runs before the step is recorded: the cancel is then in flight
        state["seen"] += 1
        if state["seen"] - 1 == cancel_at_step:
            assert store.cancel(step["run_id"], source=CancelSource.SYSTEM, reason="t").applied
            state["cancelled_at"] = time.time()
            state["faults"] = 1 + len(segment.RETRY_PAUSES)  # every try of this boundary fails

    def failing_boundary(execute, sql, params, many, context):
        statement = sql.replace('"', "")
        if state["faults"] and statement.startswith(
            ("WITH renewed AS (UPDATE nrllm_agents_agentrun", "UPDATE nrllm_agents_agentrun SET lease_expires")
        ):
            state["faults"] -= 1
            raise OperationalError("canceling statement due to statement timeout")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(failing_boundary):
        result = runtime.run(
            {"prompt": "p", "tools": ["calculator"], "script": SCRIPT, "max_iterations": 80}, on_step=on_step
        )
    assert state["faults"] == 0, "the boundary was not retried as often as expected"
    assert result.outcome.value == "cancelled"
    journal = [json.loads(line) for line in journal_path.read_text().splitlines()]
    assert [e for e in journal if e["t"] > state["cancelled_at"]] == []
    kinds = list(AgentRunEvent.objects.filter(run_id=result.run_id).order_by("sequence").values_list("kind", flat=True))
    assert len(kinds) == cancel_at_step + 2 and kinds[-1] == "cancelled"  # the step in flight, then the ack


@pytest.mark.postgres_only
def test_a_storm_of_cancelled_statements_never_lets_work_start_after_a_boundary(tmp_path, monkeypatch, caplog):
    # The storm targets the backends segments hold; pooled connections given back between
    # boundaries would carry it to whichever thread takes them next (this test's own queries).
    monkeypatch.setattr("nrllm_agents.runtime.segment.release_connection", lambda: None)
    journal_path = tmp_path / "journal.jsonl"
    monkeypatch.setenv("NRLLM_CALL_JOURNAL", str(journal_path))
    caplog.set_level(logging.WARNING, logger="nrllm_agents")
    rng = random.Random(11)
    committed: dict[str, float] = {}
    pids: set[int] = set()
    lock = threading.Lock()
    errors: list[BaseException] = []

    def segment(run_ids: list[str], ready: threading.Event) -> None:
        def on_step(step: dict) -> None:
            with lock:
                pids.add(connection.connection.info.backend_pid)
                if step["run_id"] not in run_ids:
                    run_ids.append(step["run_id"])
            ready.set()

        try:
            AgentRuntime().run(
                {"prompt": "p", "tools": ["calculator"], "script": SCRIPT, "max_iterations": 80}, on_step=on_step
            )
        except BaseException as exc:  # a fault outside the boundary (e.g. the claim) ends the run: not our claim
            errors.append(exc)
        finally:
            ready.set()  # also when the storm hit the run's start and it never began: nothing to cancel
            with lock:
                pids.discard(connection.connection.info.backend_pid if connection.connection else -1)
            connection.close()

    def storm(stop: threading.Event) -> None:
        with connection.cursor() as cursor:
            while not stop.is_set():
                with lock:
                    targets = list(pids)
                for pid in targets:
                    cursor.execute("SELECT pg_cancel_backend(%s)", [pid])
                time.sleep(0.002)
        connection.close()

    all_runs: list[str] = []
    for _ in range(ROUNDS):
        stop = threading.Event()
        # a daemon, stopped whatever happens: a failed round must not leave it holding pytest open
        stormer = threading.Thread(target=storm, args=(stop,), daemon=True)
        stormer.start()
        try:
            segments = []
            for _ in range(RUNS_PER_ROUND):
                ids: list[str] = []
                ready = threading.Event()
                thread = threading.Thread(target=segment, args=(ids, ready), daemon=True)
                thread.start()
                segments.append((thread, ids, ready))
            for _, ids, ready in segments:
                assert ready.wait(60)
                if not ids:
                    continue  # the storm hit the run's start (its claim): it never began
                time.sleep(rng.uniform(0.0, 0.15))  # a random moment in the run
                run_id = ids[0]
                if store.cancel(run_id, source=CancelSource.SYSTEM, reason="storm").applied:
                    committed[run_id] = time.time()
            for thread, ids, _ in segments:
                thread.join(60)
                assert not thread.is_alive()
                all_runs.extend(ids)
        finally:
            stop.set()
            stormer.join(10)

    faults = [r for r in caplog.records if "failed (OperationalError)" in r.getMessage()]
    assert faults, "the storm never hit a statement: the test proves nothing"
    journal = [json.loads(line) for line in Path(journal_path).read_text().splitlines()]
    assert committed, "no run was cancelled"
    for run_id, at in committed.items():
        run = AgentRun.objects.get(pk=run_id)
        assert run.status == RunStatus.CANCELLED
        late = [e["t"] for e in journal if e["run_id"] == run_id and e["t"] > at]
        # A call may start right after the last boundary before the cancel (the token then
        # interrupts it), never after a boundary that came after the cancel had committed.
        boundaries_after = [
            c.timestamp()
            for c in AgentRunEvent.objects.filter(run_id=run_id)
            .exclude(kind="cancelled")
            .values_list("created_at", flat=True)
            if c.timestamp() > at
        ]
        violations = [t for t in late if any(b < t for b in boundaries_after)]
        assert not violations, (
            f"run {run_id}: {len(violations)} calls started after a boundary that followed the cancel"
        )
        steps = list(AgentRunEvent.objects.filter(run_id=run_id).order_by("sequence").values_list("kind", flat=True))
        assert steps.count("cancelled") <= 1
        if run.stopped_at is not None:
            assert steps[-1] == "cancelled"
        # Gap-free: every boundary's step is there exactly once.
        sequences = list(
            AgentRunEvent.objects.filter(run_id=run_id).order_by("sequence").values_list("sequence", flat=True)
        )
        assert sequences == list(range(len(sequences)))
