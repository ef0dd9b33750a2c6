"""The process's MCP catalog: one source of the offered tools, read without waiting by every
surface, and a server that broke after its listing answers a run's call at once.

Real servers: ours over stdio (``nrllm_agents.testing.mcp_server``), one with its listing made to
hang by a switch file. ``transaction=True``: the runtime records steps on connections of its own.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.core.management import call_command

from nrllm_agents.catalog import agents, connections
from nrllm_agents.mcp import catalog
from nrllm_agents.mcp.client import hub
from nrllm_agents.models import AgentRun, AgentRunEvent
from nrllm_agents.runtime.agent_runtime import AgentRuntime
from nrllm_agents.testing import mcp_servers
from tests.integration.api.conftest import token_client

# MCP servers over stdio are child processes
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

ECHO = [{"tool_calls": [{"name": "ours__echo", "arguments": {"text": "hi"}}]}, {"content": "done"}]


def error(response, name: str) -> str:
    """The 400's message for field ``name`` (DRF gives a list of them)."""
    value = response.json()[name]
    return " ".join(value) if isinstance(value, list) else value


@pytest.fixture
def ours(settings, tmp_path):
    """Our server over stdio, whose listing hangs while the returned file exists; listed once."""
    flag = tmp_path / "hang"
    entry = mcp_servers.ours(switches=("--hang-listing-when", str(flag)), connectTimeout=5)
    settings.NRLLM_AGENTS = {**getattr(settings, "NRLLM_AGENTS", {}), "MCP_SERVERS": {"mcpServers": {"ours": entry}}}
    catalog.forget()
    assert "ours__echo" in catalog.refresh().tools
    yield flag
    hub().close()
    catalog.forget()


def test_rest_runs_and_thread_messages_take_exactly_the_listed_tools(ours, alice):
    api = token_client(alice)
    body = {"prompt": "p", "tools": ["ours__echo"], "script": ECHO, "mode": "sync"}
    created = api.post("/api/runs/", body, format="json")
    assert created.status_code == 201, created.content
    assert AgentRun.objects.get(pk=created.json()["run_id"]).tools == ["ours__echo"]

    refused = api.post("/api/runs/", {**body, "tools": ["ours__echo", "ours__nope"]}, format="json")
    assert refused.status_code == 400
    assert error(refused, "tools").startswith("unknown tools: ours__nope; available: ")

    thread = api.post("/api/threads/", {}, format="json").json()["thread_id"]
    message = {"prompt": "p", "tools": ["ours__echo"], "script": ECHO}
    posted = api.post(f"/api/threads/{thread}/messages/", message, format="json")
    assert posted.status_code in (201, 202), posted.content
    refused = api.post(f"/api/threads/{thread}/messages/", {**message, "tools": ["nope"]}, format="json")
    assert refused.status_code == 400 and error(refused, "tools").startswith("unknown tools: nope;")

    listed = {t["name"] for t in api.get("/api/tools/").json()["tools"]}
    assert "ours__echo" in listed


def test_the_playground_the_cli_and_agents_take_the_same_names(ours, alice, client, capsys):
    client.force_login(alice)
    page = client.get("/playground/").content.decode()
    assert 'value="ours__echo"' in page
    started = client.post(
        "/playground/runs/",
        {"prompt": "p", "provider": "scripted", "tools": ["ours__echo"], "max_iterations": 3, "mode": "queued"},
    )
    assert started.status_code in (302, 303), started.content.decode()[:2000]
    assert agents.validated({"tools": ["ours__echo"]})["tools"] == ["ours__echo"]
    with pytest.raises(agents.InvalidAgent, match="unknown tools: ours__nope"):
        agents.validated({"tools": ["ours__nope"]})
    call_command("agent_run", "p", "--tool", "ours__echo", "--script", '[{"content": "ok"}]')
    assert AgentRun.objects.filter(tools=["ours__echo"]).count() == 2


def test_a_run_calling_a_tool_of_a_server_that_broke_gets_a_tool_error_at_once(ours, alice):
    ours.touch()  # from now on the server hangs on its listing
    hub().close()  # and the session is gone: the next start is the one that hangs
    began = time.monotonic()
    broken = catalog.refresh()  # what the background lister does: waits out the connect timeout
    assert time.monotonic() - began >= 4.5
    assert "ours__echo" in broken.tools and "did not complete its handshake" in broken.broken["ours"]

    began = time.monotonic()
    result = AgentRuntime().run({"prompt": "p", "tools": ["ours__echo"], "script": ECHO})
    took = time.monotonic() - began
    assert result.outcome == "completed"
    tool = AgentRunEvent.objects.get(run_id=result.run_id, kind="tool").payload
    assert "did not complete its handshake" in tool["error"]
    assert took < 3.0, f"the call waited {took:.1f} s on a server known to be broken"  # generous: the wait is 5 s

    # The API lists the server's last tools, marked unavailable, without waiting either.
    began = time.monotonic()
    body = token_client(alice).get("/api/tools/").json()
    assert time.monotonic() - began < 3.0
    assert "ours__echo" in {t["name"] for t in body["tools"]} and "ours" in body["unavailable"]


def test_unknown_connection_names_the_others_only_to_who_may_see_connections(alice, django_user_model):
    connections.save("vendor-secret-name", kind="openai", base_url="http://127.0.0.1:9/v1", default_model="m")
    body = {"prompt": "p", "connection": "nope"}
    refused = token_client(alice).post("/api/runs/", body, format="json")
    assert refused.status_code == 400 and error(refused, "connection") == "unknown connection"
    assert "vendor-secret-name" not in refused.content.decode()

    staff = django_user_model.objects.create_user("ops", is_staff=True, is_superuser=True)
    refused = token_client(staff).post("/api/runs/", body, format="json")
    assert refused.status_code == 400 and "one of vendor-secret-name" in error(refused, "connection")


def test_readers_in_requests_never_list_and_the_background_lists_at_a_bounded_rate(settings, monkeypatch):
    """200 reads inside ``without_waiting`` in about a second: none lists in its own thread, and
    the background thread lists at most twice (once at once, then after its 2 s pause)."""
    entry = mcp_servers.ours()
    settings.NRLLM_AGENTS = {**getattr(settings, "NRLLM_AGENTS", {}), "MCP_SERVERS": {"mcpServers": {"ours": entry}}}
    catalog.forget()
    passes: list[str] = []
    listing = catalog.refresh

    def counted(**kwargs):
        passes.append(threading.current_thread().name)
        return listing(**kwargs)

    monkeypatch.setattr(catalog, "refresh", counted)
    try:
        slowest = 0.0
        with catalog.without_waiting():
            for _ in range(200):
                began = time.monotonic()
                catalog.current()
                slowest = max(slowest, time.monotonic() - began)
                time.sleep(0.005)
        assert slowest < 0.5  # generous: a read is a copy of what is known
        assert 1 <= len(passes) <= 2 and set(passes) == {"nrllm-mcp-catalog"}, passes
    finally:
        hub().close()
        catalog.forget()
