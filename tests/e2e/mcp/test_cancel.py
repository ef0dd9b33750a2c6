"""A cancel reaches the MCP server: ``notifications/cancelled`` for the call in flight, measured
on the server's side of the pipe (our test server records when its handler is cancelled).

Interactive runs execute on a thread of this test process and are cancelled by another
process (``manage.py agent_cancel``); queued runs execute on real ``rqworker`` and
``agent_worker`` processes and are cancelled by this one. No server process outlives a worker,
whether it was stopped with SIGTERM or SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from datetime import datetime
from pathlib import Path

import pytest
from django.db import connection

from nrllm_agents import store
from nrllm_agents.mcp import catalog
from nrllm_agents.mcp.client import hub
from nrllm_agents.models import AgentRun, AgentRunEvent, CancelSource, RunStatus
from nrllm_agents.runtime.agent_runtime import AgentRuntime, Outcome
from nrllm_agents.testing import mcp_servers
from tests.conftest import manage
from tests.e2e.processes import Workers, _children
from tests.waits import wait_for

# transaction=True everywhere: the executing thread or process sees only committed rows, and we theirs.
pytestmark = pytest.mark.django_db(transaction=True)

# The acceptance bound is 50 ms (bench/mcp_cancel.py measures it); tests hold a generous one.
BOUND_SECONDS = 0.5
SLOW = [{"tool_calls": [{"name": "ours__slow", "arguments": {"seconds": 30, "steps": 300}}]}, {"content": "never"}]


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie waiting for its reaper counts as ended)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


@pytest.fixture(autouse=True)
def fast_poll(settings):
    """Where no NOTIFY can reach a process (SQLite), it polls every 0.1 s here, so the bound holds."""
    settings.NRLLM_AGENTS = {**getattr(settings, "NRLLM_AGENTS", {}), "CANCEL_POLL_SECONDS": 0.1}


@pytest.fixture
def configured(settings, tmp_path):
    """Our server on stdio for this process (settings) and for child processes (a config file)."""
    record = tmp_path / "server.jsonl"
    document = {"mcpServers": {"ours": mcp_servers.ours(record)}}
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(document))
    settings.NRLLM_AGENTS = {**getattr(settings, "NRLLM_AGENTS", {}), "MCP_SERVERS": document}
    catalog.forget()
    yield record, path
    hub().close()
    catalog.forget()


def started(record: Path, progressed: int = 1) -> dict:
    """Wait until the server has started a ``slow`` call and reported ``progressed`` steps of it."""

    def probe():
        events = mcp_servers.records(record)
        calls = [e for e in events if e["event"] == "started" and e["tool"] == "slow"]
        if (
            calls
            and sum(1 for e in events if e["event"] == "progress" and e["request_id"] == calls[-1]["request_id"])
            >= progressed
        ):
            return calls[-1]
        return None

    return wait_for(what="the MCP server to start the call and report progress", predicate=probe, timeout=60)


def server_cancelled(record: Path, request_id: str) -> dict:
    return wait_for(
        what="the MCP server to see its handler cancelled",
        predicate=lambda: next(
            (e for e in mcp_servers.records(record) if e["event"] == "cancelled" and e["request_id"] == request_id),
            None,
        ),
        timeout=10,
    )


def assert_cancelled_mid_call(run_id, record: Path, call: dict) -> None:
    """The server was told within the bound; the stream ends interrupted tool step → cancelled."""
    wait_for(
        what="the run to stop",
        predicate=lambda: AgentRun.objects.filter(pk=run_id, stopped_at__isnull=False).exists(),
        timeout=30,
    )
    run = AgentRun.objects.get(pk=run_id)
    told = server_cancelled(record, call["request_id"])
    latency = told["t"] - run.cancel_requested_at.timestamp()
    print(f"server saw the cancel {latency * 1000:.1f} ms after the cancel's statement")
    assert latency < BOUND_SECONDS
    assert not [e for e in mcp_servers.records(record) if e["event"] == "finished"], "the call ran to its end"
    events = list(AgentRunEvent.objects.filter(run_id=run_id).order_by("sequence"))
    assert [e.kind for e in events] == ["request", "llm", "tool", "cancelled"]
    tool, cancelled = events[2], events[3]
    assert tool.payload["interrupted"] is True and tool.payload["result"] is None
    assert {k: v for k, v in tool.payload["mcp"].items() if k != "cancelled_at"} == {"server": "ours", "tool": "slow"}
    # When our side had cancelled the request, no later than the server saw it (+ clock resolution).
    sent = datetime.fromisoformat(tool.payload["mcp"]["cancelled_at"]).timestamp()
    assert run.cancel_requested_at.timestamp() <= sent + 0.002 and sent <= told["t"] + 0.002
    assert tool.payload["progress"] and tool.payload["progress"][0]["total"] == 300
    assert cancelled.payload["interrupted_sequence"] == tool.sequence
    assert run.status == RunStatus.CANCELLED


def test_an_interactive_run_cancelled_by_another_process_tells_the_stdio_server(configured, child_env):
    record, _ = configured
    outcome: dict = {}

    def segment():
        try:
            outcome["result"] = AgentRuntime().run({"prompt": "p", "tools": ["ours__slow"], "script": SLOW})
        finally:
            connection.close()

    thread = threading.Thread(target=segment, daemon=True)
    thread.start()
    call = started(record, progressed=2)
    run_id = AgentRun.objects.get().pk
    cancel = manage("agent_cancel", str(run_id), "--reason", "stop the tool", env=child_env)
    out, err = cancel.communicate(timeout=60)
    assert cancel.returncode == 0, (out, err)
    thread.join(30)
    assert outcome["result"].outcome == Outcome.CANCELLED
    assert_cancelled_mid_call(run_id, record, call)
    # The session stays usable: the next call goes to the same server process.
    again = AgentRuntime().run(
        {
            "prompt": "p",
            "tools": ["ours__echo"],
            "script": [{"tool_calls": [{"name": "ours__echo", "arguments": {"text": "next"}}]}, {"content": "ok"}],
        }
    )
    assert again.outcome == Outcome.COMPLETED
    echoed = [e for e in mcp_servers.records(record) if e["tool"] == "echo"]
    assert echoed and echoed[0]["pid"] == call["pid"] and hub().started("ours") == 1


def test_an_interactive_run_over_streamable_http_tells_the_server(settings, tmp_path):
    record = tmp_path / "server.jsonl"
    with mcp_servers.HttpServer("ours", record=record) as server:
        settings.NRLLM_AGENTS = {
            **getattr(settings, "NRLLM_AGENTS", {}),
            "MCP_SERVERS": {"mcpServers": {"ours": server.entry()}},
        }
        catalog.forget()
        try:
            runtime = AgentRuntime()
            outcome: dict = {}

            def segment():
                try:
                    outcome["result"] = runtime.run({"prompt": "p", "tools": ["ours__slow"], "script": SLOW})
                finally:
                    connection.close()

            thread = threading.Thread(target=segment, daemon=True)
            thread.start()
            call = started(record, progressed=2)
            runtime.cancel(AgentRun.objects.get().pk, source=CancelSource.SYSTEM, reason="stop the tool")
            thread.join(30)
            assert outcome["result"].outcome == Outcome.CANCELLED
            assert_cancelled_mid_call(AgentRun.objects.get().pk, record, call)
            echo = runtime.run(
                {
                    "prompt": "p",
                    "tools": ["ours__echo"],
                    "script": [{"tool_calls": [{"name": "ours__echo", "arguments": {"text": "x"}}]}, {"content": "ok"}],
                }
            )
            assert echo.outcome == Outcome.COMPLETED
        finally:
            hub().close()
            catalog.forget()


@pytest.mark.parametrize("command", ["rqworker", "agent_worker"])
def test_a_queued_run_on_a_real_worker_tells_the_server_and_the_next_call_works(
    command, configured, child_env, redis_url, tmp_path, settings
):
    record, path = configured
    settings.REDIS_URL = redis_url
    settings.RQ_QUEUES = {"default": {"URL": redis_url}}
    env = {**child_env, "REDIS_URL": redis_url, "NRLLM_MCP_CONFIG": str(path), "NRLLM_CANCEL_POLL_SECONDS": "0.1"}
    runtime = AgentRuntime()
    with Workers(env, count=1, log_dir=tmp_path / "logs", command=command).start() as workers:
        run_id = runtime.enqueue({"prompt": "p", "tools": ["ours__slow"], "script": SLOW})
        call = started(record, progressed=2)
        runtime.cancel(run_id, source=CancelSource.SYSTEM, reason="stop the tool")
        assert_cancelled_mid_call(run_id, record, call)
        echo = runtime.enqueue(
            {
                "prompt": "p",
                "tools": ["ours__echo"],
                "script": [{"tool_calls": [{"name": "ours__echo", "arguments": {"text": "x"}}]}, {"content": "ok"}],
            }
        )
        wait_for(
            what="the next run to complete",
            predicate=lambda: AgentRun.objects.filter(pk=echo, status=RunStatus.COMPLETED).exists(),
            timeout=60,
        )
        if command == "agent_worker":  # one process: the same session served both runs
            echoed = [e for e in mcp_servers.records(record) if e["tool"] == "echo"]
            assert echoed[0]["pid"] == call["pid"], workers.logs()


# The cases that take different paths to the guard's end (nrllm_agents/mcp/guard.py): a SIGKILL
# ends the guard's parent whichever kind of worker it is (PR_SET_PDEATHSIG), so one kind shows it;
# a SIGTERM ends an agent_worker through its hub's close at exit, an rqworker's horse through its
# os._exit (no atexit: the parent's death again), so both kinds are shown.
@pytest.mark.parametrize(
    "command, how", [("agent_worker", "SIGTERM"), ("agent_worker", "SIGKILL"), ("rqworker", "SIGTERM")]
)
def test_no_server_outlives_its_worker(command, how, configured, child_env, redis_url, tmp_path, settings):
    """Even a stubborn server (it ignores SIGTERM and the end of its input) is gone after its worker.

    This process validates the request against the plain server (``configured``); the worker
    runs the stubborn one.
    """
    record, path = tmp_path / "stubborn.jsonl", tmp_path / "stubborn.json"
    entry = mcp_servers.ours(record)
    entry["args"].append("--stubborn")
    path.write_text(json.dumps({"mcpServers": {"ours": entry}}))
    settings.REDIS_URL = redis_url
    settings.RQ_QUEUES = {"default": {"URL": redis_url}}
    env = {**child_env, "REDIS_URL": redis_url, "NRLLM_MCP_CONFIG": str(path)}
    runtime = AgentRuntime()
    with Workers(env, count=1, log_dir=tmp_path / "logs", command=command).start() as workers:
        runtime.enqueue({"prompt": "p", "tools": ["ours__slow"], "script": SLOW})
        call = started(record)
        server, guard = call["pid"], call["ppid"]
        assert alive(server) and alive(guard)
        if how == "SIGKILL":
            # The worker by pid alone (an agent_worker: no horse); nothing of this test reaches the server.
            worker = workers.processes[0]
            assert guard in _children(worker.pid), workers.logs()  # the guard's parent is the one killed
            os.kill(worker.pid, signal.SIGKILL)
            worker.wait(10)
        else:
            workers.terminate(0)
            workers.wait_exit(0, timeout=60)
        wait_for(
            what="the MCP server and its guard to end",
            predicate=lambda: not alive(server) and not alive(guard),
            timeout=15,
        )


def test_a_resumed_run_cancelled_mid_call_tells_the_server(settings, tmp_path):
    """``approve`` resumes a run whose MCP call needed a decision; the cancel reaches that call."""
    record = tmp_path / "server.jsonl"
    entry = {**mcp_servers.ours(record), "approval": {"slow": True}}
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "MCP_SERVERS": {"mcpServers": {"ours": entry}}}
    catalog.forget()
    runtime = AgentRuntime()
    try:
        waiting = runtime.run({"prompt": "p", "tools": ["ours__slow"], "script": SLOW})
        assert waiting.outcome == Outcome.AWAITING_APPROVAL
        outcome: dict = {}

        def segment():
            try:
                outcome["result"] = runtime.approve(waiting.run_id, True)
            finally:
                connection.close()

        thread = threading.Thread(target=segment, daemon=True)
        thread.start()
        call = started(record, progressed=2)
        store.cancel(waiting.run_id, source=CancelSource.SYSTEM, reason="stop the tool")  # the signal path only
        thread.join(30)
        assert outcome["result"].outcome == Outcome.CANCELLED
        wait_for(
            what="the run to stop",
            predicate=lambda: AgentRun.objects.filter(pk=waiting.run_id, stopped_at__isnull=False).exists(),
        )
        told = server_cancelled(record, call["request_id"])
        assert told["t"] - AgentRun.objects.get(pk=waiting.run_id).cancel_requested_at.timestamp() < BOUND_SECONDS
        kinds = list(
            AgentRunEvent.objects.filter(run_id=waiting.run_id).order_by("sequence").values_list("kind", "payload")
        )
        assert [k for k, _ in kinds] == ["request", "llm", "approval", "tool", "cancelled"]
        assert kinds[3][1]["interrupted"] is True and kinds[3][1]["progress"]
    finally:
        hub().close()
        catalog.forget()


def test_nothing_is_sent_once_the_token_has_tripped(tmp_path):
    """A call whose token tripped before it started never reaches the server."""
    from nrllm_agents.domain.cancel import CancelToken
    from nrllm_agents.mcp import config
    from nrllm_agents.mcp.client import Hub, McpCallInterrupted

    record = tmp_path / "server.jsonl"
    server = config.parse({"ours": mcp_servers.ours(record)}, origin="test")["ours"]
    own = Hub()
    try:
        own.tools(server)  # started and listed
        token = CancelToken()
        token.cancel()
        with pytest.raises(McpCallInterrupted):
            own.call(server, "echo", {"text": "x"}, token=token, timeout=5)
        result, _ = own.call(server, "echo", {"text": "after"}, token=CancelToken(), timeout=5)
        assert result.content[0].text == "after"
        assert [e["tool"] for e in mcp_servers.records(record)] == ["echo"]  # only the second call
    finally:
        own.close()
