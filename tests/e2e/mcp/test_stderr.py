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

from nrllm_agents.testing import mcp_servers
from tests.conftest import manage

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
