"""Nothing on a command's stderr but the logs, whatever the MCP servers do (issue 32 item 6).

Real commands in child processes (``agent_tools``, ``check``, ``agent_run``) against real
servers: ours writing a banner to its stderr (as ``Secure MCP Filesystem Server running on
stdio`` does), ours hanging on its listing, a command that does not exist, and an HTTP
endpoint that accepts connections and never answers. Before, asyncio's "Future exception was
never retrieved" and the banners went to the command's stderr; now a server's stderr is logged,
a line at a time, tagged with its name.
"""

from __future__ import annotations

import json
import socket
import threading

import pytest

from nrllm_agents.models import AgentRun, AgentRunEvent, RunStatus
from nrllm_agents.testing import mcp_servers
from tests.conftest import manage
from tests.e2e.processes import Workers, wait_for

pytestmark = pytest.mark.django_db(transaction=True)  # the children read the committed schema

BANNER = "Secure MCP Test Server running on stdio"


@pytest.fixture
def silent_http():
    """A loopback port that accepts connections and never answers; its MCP URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/mcp"
    stop.set()
    thread.join(5)
    for s in [*held, listener]:
        s.close()


@pytest.fixture
def env(child_env, tmp_path, silent_http):
    document = {
        "mcpServers": {
            "banner": mcp_servers.ours(switches=("--banner", BANNER)),
            "hangs": mcp_servers.ours(switches=("--hang-listing",), connectTimeout=2),
            "nocmd": {"command": "/nonexistent/mcp-server"},
            "silent": {"type": "http", "url": silent_http, "connectTimeout": 2},
        }
    }
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(document))
    return {**child_env, "NRLLM_MCP_CONFIG": str(path), "NRLLM_LOG_FORMAT": "json", "NRLLM_LOG_LEVEL": "INFO"}


def records(stderr: str) -> list[dict]:
    found = []
    for line in stderr.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            found.append(value)
    return found


SCRIPT = json.dumps([{"tool_calls": [{"name": "banner__echo", "arguments": {"text": "hi"}}]}, {"content": "done"}])


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (("agent_tools",), 1),
        (("check",), 1),
        (("agent_run", "p", "--tool", "banner__echo", "--script", SCRIPT), 0),
        (("agent_run", "p", "--tool", "hangs__anything", "--script", SCRIPT), 2),
    ],
    ids=["agent_tools", "check", "agent_run", "agent_run_on_a_broken_server"],
)
def test_a_command_writes_no_traceback_and_no_banner_and_logs_the_servers_stderr(env, args, code):
    child = manage(*args, env=env)
    out, err = child.communicate(timeout=120)
    assert child.returncode == code, (out, err)
    assert "never retrieved" not in err and "Traceback" not in err, err
    assert BANNER not in out, out
    for line in err.splitlines():  # the banner only inside a log record
        assert BANNER not in line or line.startswith("{"), err
    tagged = [r for r in records(err) if r.get("logger") == "nrllm_agents.mcp.stderr"]
    assert any(r["message"] == f"MCP server 'banner': {BANNER}" and r["mcp_server"] == "banner" for r in tagged), err
    if code:  # the broken servers are named, no traceback
        assert "hangs" in err and ("nocmd" in err or args[0] == "agent_run")


HOSTILE = json.dumps(
    [
        {"tool_calls": [{"name": "banner__garbage", "arguments": {}}]},
        {"tool_calls": [{"name": "banner__die", "arguments": {}}]},
        {"tool_calls": [{"name": "banner__echo", "arguments": {"text": "after the crash"}}]},
        {"content": "done"},
    ]
)


@pytest.mark.parametrize("command", ["agent_worker", "rqworker"])
def test_a_worker_logs_a_breaking_servers_stderr_and_no_traceback(env, redis_url, tmp_path, command):
    """A run in a real worker meets a server that writes garbage on the wire, then one that dies
    mid-call: each is a tool error for the model, the run completes, and the worker's output
    holds log records only (the server's banner, twice: it was started again, tagged)."""
    config = tmp_path / "banner.json"  # that server alone: no other server's timeout to wait out
    config.write_text(json.dumps({"mcpServers": {"banner": mcp_servers.ours(switches=("--banner", BANNER))}}))
    worker_env = {**env, "REDIS_URL": redis_url, "NRLLM_MCP_CONFIG": str(config)}
    with Workers(worker_env, count=1, log_dir=tmp_path / "logs", command=command) as workers:
        tools = [arg for name in ("garbage", "die", "echo") for arg in ("--tool", f"banner__{name}")]
        child = manage("agent_run", "p", *tools, "--script", HOSTILE, "--queued", "--json", env=worker_env)
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, (out, err)
        run_id = json.loads(out.splitlines()[0])["run_id"]
        run = wait_for(
            lambda: AgentRun.objects.filter(pk=run_id, stopped_at__isnull=False).first(), timeout=120, what="the run"
        )
        log = workers.log_text(workers.names[0])
    assert run.status == RunStatus.COMPLETED, log
    garbage, died, echo = [
        e.payload for e in AgentRunEvent.objects.filter(run_id=run_id, kind="tool").order_by("sequence")
    ]
    assert "not valid JSON-RPC" in garbage["error"] and "closed the connection during the call" in died["error"]
    assert echo["error"] is None and echo["result"]["text"] == "after the crash"
    assert "never retrieved" not in log and "Traceback" not in log, log
    for line in log.splitlines():  # the banner only inside a log record
        assert BANNER not in line or line.startswith("{"), log
    tagged = [r for r in records(log) if r.get("logger") == "nrllm_agents.mcp.stderr"]
    assert sum(r["message"] == f"MCP server 'banner': {BANNER}" for r in tagged) == 2, log
    # the SDK's own error about the garbage line: one line, without its traceback or the bytes
    [sdk] = [r for r in records(log) if r.get("logger") == "mcp.client.stdio"]
    assert sdk["message"] == "Failed to parse JSONRPC message from server (ValidationError)", log
    assert "exc_info" not in sdk and "not json" not in log, log
