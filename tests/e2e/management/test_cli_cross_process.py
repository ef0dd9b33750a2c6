"""The commands as separate processes: ``agent_run`` in one, ``agent_cancel`` (or Ctrl-C) from
outside. The run stops at its next step boundary, the stream shows exactly where, and the
child's call journal proves that no model call or tool started after that boundary.

Every test here drives child processes against the test database, so each one needs
``transaction=True``: the children only see committed rows, and the test reads theirs.
"""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from nrllm_agents.models import AgentRun, AgentRunEvent, RunStatus
from nrllm_agents.presentation import presenters
from tests.conftest import manage
from tests.waits import wait_for

WAIT = 60  # seconds: a safety net against a hung child, never a measured bound


def sleeps(n: int, *, delay: float, seconds: float, calls: int = 1) -> list[dict[str, Any]]:
    turn = {"delay": delay, "tool_calls": [{"name": "sleep", "arguments": {"seconds": seconds}}] * calls}
    return [turn] * n + [{"content": "too late"}]


class Child:
    """A ``manage.py`` child whose output lines are collected by reader threads."""

    def __init__(self, *args: str, env: dict[str, str]) -> None:
        self.args = args
        self.proc = manage(*args, env=env)
        self.out: queue.Queue[str] = queue.Queue()
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self._err_seen = threading.Condition()
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.out), daemon=True).start()
        threading.Thread(target=self._pump_err, daemon=True).start()

    @staticmethod
    def _pump(stream: Any, into: queue.Queue[str]) -> None:
        for line in stream:
            into.put(line.rstrip("\n"))

    def _pump_err(self) -> None:
        for line in self.proc.stderr:
            with self._err_seen:
                self.stderr.append(line.rstrip("\n"))
                self._err_seen.notify_all()

    def read_until(self, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """Read JSON lines until one satisfies ``predicate``; returns it."""
        while True:
            try:
                line = self.out.get(timeout=WAIT)
            except queue.Empty:
                raise AssertionError(f"{self.args[0]}: no matching line; stderr: {self.stderr}") from None
            self.stdout.append(line)
            obj = json.loads(line)
            if predicate(obj):
                return obj

    def wait_stderr(self, text: str) -> None:
        with self._err_seen:
            assert self._err_seen.wait_for(lambda: any(text in line for line in self.stderr), timeout=WAIT), self.stderr

    def finish_text(self) -> tuple[int, list[str]]:
        """Wait for the exit; returns the exit code and every stdout line."""
        code = self.proc.wait(timeout=WAIT)
        while True:
            try:
                self.stdout.append(self.out.get(timeout=5))
            except queue.Empty:
                break
        return code, self.stdout

    def finish(self) -> tuple[int, list[dict[str, Any]]]:
        """Wait for the exit; returns the exit code and every stdout line as JSON."""
        code, text = self.finish_text()
        lines = [json.loads(line) for line in text]
        assert all("event" in obj for obj in lines), text
        return code, lines

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=WAIT)


@pytest.fixture
def children():
    """Children started by a test; any still alive at the end is killed."""
    started: list[Child] = []
    yield started
    for child in started:
        child.kill()


def start(children: list[Child], *args: str, env: dict[str, str]) -> Child:
    child = Child(*args, env=env)
    children.append(child)
    return child


def journal(env: dict[str, str], pid: int) -> list[dict[str, Any]]:
    path = Path(env["NRLLM_CALL_JOURNAL"])
    entries = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [e for e in entries if e["pid"] == pid]


def assert_stopped_at_boundary(child: Child, lines: list[dict[str, Any]], env: dict[str, str]) -> dict[str, Any]:
    """The printed stream equals the stored one and ends: in-flight step, then ``cancelled``;
    the child journaled no model call or tool start after that boundary."""
    run_id = lines[0]["run_id"]
    assert lines[0] == {"event": "started", "run_id": run_id}
    steps = [line["step"] for line in lines[1:-1]]
    stored = [
        json.loads(json.dumps(presenters.event_dict(e)))
        for e in AgentRunEvent.objects.filter(run_id=run_id).order_by("sequence")
    ]
    assert steps == stored and [s["sequence"] for s in steps] == list(range(len(steps)))
    boundary, ack = steps[-2], steps[-1]
    assert ack["kind"] == "cancelled" and ack["payload"]["boundary_sequence"] == boundary["sequence"]
    assert not any(s["kind"] == "cancelled" for s in steps[:-1])

    started = journal(env, child.proc.pid)
    assert sum(e["what"] == "model" for e in started) == sum(s["kind"] == "llm" for s in steps)
    assert sum(e["what"] == "tool" for e in started) == sum(s["kind"] == "tool" for s in steps)
    boundary_at = datetime.fromisoformat(boundary["created_at"]).timestamp()
    assert started and all(e["t"] <= boundary_at for e in started)

    row = AgentRun.objects.get(pk=run_id)
    assert (row.status, row.cancel_source) == (RunStatus.CANCELLED, "cli") and row.stopped_at is not None
    assert lines[-1]["event"] == "cancelled" and lines[-1]["status"] == "cancelled"
    return ack


# Where the cancel tends to land: a long model delay, a long tool, or between two tools of a turn.
SCRIPTS = {
    "model_call": (sleeps(30, delay=0.6, seconds=0.02), lambda s: s["kind"] == "request" and s["round"] == 2),
    "tool": (sleeps(30, delay=0.02, seconds=0.6), lambda s: s["kind"] == "llm" and s["round"] == 2),
    "same_turn": (sleeps(30, delay=0.05, seconds=0.3, calls=2), lambda s: s["kind"] == "tool" and s["round"] == 2),
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("moment", sorted(SCRIPTS))
def test_agent_cancel_from_another_process_stops_agent_run_at_the_next_boundary(child_env, children, moment):
    script, ready = SCRIPTS[moment]
    runner = start(
        children,
        "agent_run",
        "slow work",
        "--tool",
        "sleep",
        "--script",
        json.dumps(script),
        "--max-iterations",
        str(len(script)),
        "--json",
        env=child_env,
    )
    run_id = runner.read_until(lambda o: o["event"] == "started")["run_id"]
    runner.wait_stderr(f"manage.py agent_cancel {run_id}")  # by absolute paths (issue 48)
    runner.read_until(lambda o: o["event"] == "step" and ready(o["step"]))

    canceller = start(children, "agent_cancel", run_id, "--reason", f"e2e {moment}", env=child_env)
    cancel_code, cancel_out = canceller.finish_text()
    assert cancel_code == 0, canceller.stderr
    assert cancel_out == [
        f"Run {run_id} cancelled; it was executing: the step in flight is interrupted and recorded, then it stops."
    ]

    code, lines = runner.finish()
    assert code == 3, runner.stderr
    ack = assert_stopped_at_boundary(runner, lines, child_env)
    assert (ack["payload"]["source"], ack["payload"]["reason"]) == ("cli", f"e2e {moment}")


@pytest.mark.django_db(transaction=True)
def test_ctrl_c_cancels_agent_run_through_the_runtime(child_env, children):
    runner = start(
        children,
        "agent_run",
        "slow work",
        "--tool",
        "sleep",
        "--script",
        json.dumps(sleeps(30, delay=0.3, seconds=0.3)),
        "--max-iterations",
        "31",
        "--json",
        env=child_env,
    )
    runner.read_until(lambda o: o["event"] == "step" and o["step"]["kind"] == "tool")
    runner.proc.send_signal(signal.SIGINT)
    code, lines = runner.finish()
    assert code == 3, runner.stderr
    assert any("interrupted: cancelling the run and the step in flight" in line for line in runner.stderr)
    ack = assert_stopped_at_boundary(runner, lines, child_env)
    assert (ack["payload"]["source"], ack["payload"]["reason"]) == ("cli", "interrupted (Ctrl-C)")


@pytest.mark.django_db(transaction=True)
def test_second_ctrl_c_exits_at_once_without_waiting_for_the_step_in_flight(child_env, children):
    # The model call in flight takes 30 s; the process must be gone long before it returns.
    runner = start(
        children,
        "agent_run",
        "very slow",
        "--tool",
        "sleep",
        "--script",
        json.dumps([{"delay": 30, "content": "never"}]),
        "--json",
        env=child_env,
    )
    run_id = runner.read_until(lambda o: o["event"] == "step" and o["step"]["kind"] == "request")["step"]["run_id"]
    # A step is printed before it is stored: wait until the model call (after the store) began.
    wait_for(lambda: journal(child_env, runner.proc.pid), timeout=WAIT, interval=0.02, what="the child's journal")
    runner.proc.send_signal(signal.SIGINT)
    runner.wait_stderr("interrupted: cancelling")
    runner.proc.send_signal(signal.SIGINT)
    assert runner.proc.wait(timeout=20) == 130
    row = AgentRun.objects.get(pk=run_id)
    # The cancel asked for by the first Ctrl-C committed; nothing after the request was recorded.
    assert (row.status, row.cancel_source) == (RunStatus.CANCELLED, "cli")
    assert list(AgentRunEvent.objects.filter(run_id=run_id).values_list("kind", flat=True)) == ["request"]


@pytest.mark.sqlite  # the SQLite tier's smoke of this surface
@pytest.mark.django_db(transaction=True)
def test_agent_run_queued_follow_without_redis_end_to_end(child_env, children):
    script = [{"delay": 0.05, "tool_calls": [{"name": "sleep", "arguments": {"seconds": 0.05}}]}, {"content": "q"}]
    assert "REDIS_URL" not in child_env
    runner = start(
        children,
        "agent_run",
        "queued",
        "--tool",
        "sleep",
        "--script",
        json.dumps(script),
        "--queued",
        "--follow",
        "--json",
        env=child_env,
    )
    code, lines = runner.finish()
    assert code == 0, runner.stderr
    run_id = lines[0]["run_id"]
    assert lines[0] == {"event": "started", "run_id": run_id}
    # (the model's words may come as delta lines too: they are live, not steps)
    assert [line["step"]["kind"] for line in lines[1:-1] if line["event"] == "step"] == [
        "request",
        "llm",
        "tool",
        "request",
        "llm",
    ]
    assert {line["event"] for line in lines[1:-1]} <= {"step", "delta"}
    assert lines[-1]["event"] == "done" and AgentRun.objects.get(pk=run_id).status == RunStatus.COMPLETED


@pytest.mark.django_db(transaction=True)
def test_agent_run_queued_follow_on_redis_is_executed_by_an_rqworker(child_env, children, redis_url):
    env = {**child_env, "REDIS_URL": redis_url}
    script = [{"delay": 0.05, "tool_calls": [{"name": "sleep", "arguments": {"seconds": 0.05}}]}, {"content": "w"}]
    runner = start(
        children,
        "agent_run",
        "queued",
        "--tool",
        "sleep",
        "--script",
        json.dumps(script),
        "--queued",
        "--follow",
        "--json",
        env=env,
    )
    runner.read_until(lambda o: o["event"] == "started")
    worker = start(children, "rqworker", "default", "--burst", env=env)
    code, lines = runner.finish()
    assert code == 0, runner.stderr
    assert worker.proc.wait(timeout=WAIT) == 0, worker.stderr
    assert lines[-1]["event"] == "done"
    # The model calls and tools ran in the worker (its work horse), not in the following process.
    entries = [json.loads(line) for line in Path(env["NRLLM_CALL_JOURNAL"]).read_text().splitlines()]
    assert [e["what"] for e in entries] == ["model", "tool", "model"]
    assert runner.proc.pid not in {e["pid"] for e in entries}


@pytest.mark.django_db(transaction=True)
def test_the_printed_cancel_hint_works_as_pasted_into_another_shell(child_env, children):
    """Issue 20, item 17: the hint said ``python manage.py agent_cancel ID``, which fails without
    the venv on PATH and without DJANGO_DEBUG or a key outside ``make``."""
    runner = start(
        children, "agent_run", "slow", "--script", '[{"delay": 60, "content": "x"}]', "--json", env=child_env
    )
    run_id = runner.read_until(lambda o: o["event"] == "started")["run_id"]
    runner.wait_stderr("to cancel it: ")
    hint = next(line for line in runner.stderr if line.startswith("to cancel it: ")).removeprefix("to cancel it: ")
    assert hint.endswith(f"manage.py agent_cancel {run_id}")
    # issue 48: by absolute paths (a relative venv/bin/python failed in another folder)
    assert all(word.startswith("/") for word in hint.split() if word.endswith(("python", "manage.py"))), hint
    # Another shell, in another folder: no virtualenv on PATH, no development switch, no key of its own.
    shell = {k: v for k, v in child_env.items() if k not in ("DJANGO_DEBUG", "DJANGO_SECRET_KEY", "VIRTUAL_ENV")}
    shell["PATH"] = "/usr/bin:/bin"
    pasted = subprocess.run(["bash", "-c", hint], cwd="/", env=shell, capture_output=True, text=True, timeout=WAIT)
    assert pasted.returncode == 0, pasted.stderr
    code, lines = runner.finish()
    assert code == 3 and lines[-1]["status"] == "cancelled"
