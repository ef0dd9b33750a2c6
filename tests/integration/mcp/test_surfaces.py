"""Where the MCP tools show: ``agent_tools``, ``GET /api/tools/``, ``manage.py check``, the
operations page. Real servers (ours over stdio); a broken one is named everywhere, and no
expanded secret ever shows."""

from __future__ import annotations

import json
import sys
import time

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError, SystemCheckError
from rest_framework.test import APIClient

from nrllm_agents.mcp import catalog
from nrllm_agents.mcp.client import hub
from nrllm_agents.models import AgentRunEvent
from nrllm_agents.testing import mcp_servers
from tests.integration.api.conftest import token_client

# MCP servers over stdio are child processes
pytestmark = [pytest.mark.django_db, pytest.mark.processes]

SECRET = "tok-9f8e7d6c5b4a"


@pytest.fixture
def configured(settings, monkeypatch, tmp_path):
    """Our server (given a secret from the environment) and one whose command does not exist."""
    monkeypatch.setenv("NRLLM_TEST_SECRET_SOURCE", SECRET)
    entry = mcp_servers.ours(tmp_path / "rec.jsonl")
    entry["env"]["NRLLM_TEST_SECRET"] = "${NRLLM_TEST_SECRET_SOURCE}"
    settings.NRLLM_AGENTS = {
        **getattr(settings, "NRLLM_AGENTS", {}),
        "MCP_SERVERS": {"mcpServers": {"ours": entry, "broken": {"command": "/nonexistent/mcp-server"}}},
    }
    catalog.forget()
    yield
    hub().close()
    catalog.forget()


def test_agent_tools_lists_every_source_and_names_the_broken_server(configured, capsys):
    with pytest.raises(CommandError) as caught:
        call_command("agent_tools", "--json")
    assert caught.value.returncode == 1 and "broken" in str(caught.value)
    listing = json.loads(capsys.readouterr().out)
    by_name = {t["name"]: t for t in listing["tools"]}
    assert by_name["calculator"]["source"] == "built-in" and by_name["calculator"]["server"] is None
    assert by_name["ours__erase"] == {
        "name": "ours__erase",
        "description": by_name["ours__erase"]["description"],
        "source": "mcp",
        "server": "ours",
        "requires_approval": True,
        "idempotent": False,
        "transactional": False,  # an MCP server's effects are outside our database
    }
    assert by_name["ours__slow"]["requires_approval"] is False and by_name["ours__slow"]["idempotent"] is True
    assert "exited or closed the connection" in listing["unavailable"]["broken"]
    assert SECRET not in json.dumps(listing)


def test_the_api_lists_the_same_tools_to_a_signed_in_caller(configured, alice):
    assert APIClient().get("/api/tools/").status_code == 401
    # The first read does not wait on the servers: they are listed in the background.
    first = token_client(alice).get("/api/tools/")
    assert first.status_code == 200 and first.json()["unavailable"]["ours"] == catalog.NOT_LISTED_YET
    deadline = time.monotonic() + 30
    while True:
        response = token_client(alice).get("/api/tools/")
        assert response.status_code == 200
        body = response.json()
        if "ours" not in body["unavailable"] or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert {"calculator", "ours__echo", "ours__slow"} <= {t["name"] for t in body["tools"]}
    assert set(body["unavailable"]) == {"broken"} and SECRET not in response.content.decode()


def test_a_run_can_offer_an_mcp_tool_by_name_and_the_secret_reaches_the_server(configured, runtime):
    result = runtime.run(
        {
            "prompt": "p",
            "tools": ["ours__whoami"],
            "script": [{"tool_calls": [{"name": "ours__whoami", "arguments": {}}]}, {"content": "ok"}],
        }
    )
    assert result.outcome == "completed"
    # The server got the value (it chose to answer with it); our own records hold only the template.
    steps = list(
        AgentRunEvent.objects.filter(run_id=result.run_id).order_by("sequence").values_list("payload", flat=True)
    )
    assert steps[2]["result"]["structuredContent"]["token"] == SECRET
    assert "${NRLLM_TEST_SECRET_SOURCE}" not in json.dumps(steps[0])


def test_manage_py_check_names_the_broken_server(configured, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["manage.py", "check"])
    with pytest.raises(SystemCheckError, match=r"nrllm_agents.E016.*MCP server 'broken' is unavailable"):
        call_command("check")


def test_a_malformed_configuration_fails_every_command_check(settings):
    settings.NRLLM_AGENTS = {**getattr(settings, "NRLLM_AGENTS", {}), "MCP_SERVERS": {"mcpServers": {"x": {}}}}
    with pytest.raises(SystemCheckError, match=r"nrllm_agents.E015.*either command \(stdio\) or url"):
        call_command("check")


def test_the_operations_page_shows_a_row_per_server(configured, client, django_user_model):
    staff = django_user_model.objects.create_user("ops", password="pw", is_staff=True, is_superuser=True)
    client.force_login(staff)
    html = client.get("/admin/nrllm_agents/agentrun/operations/").content.decode()
    assert 'data-mcp-server="ours" data-ok="false"' in html and "not listed yet" in html  # the page waits on none
    catalog.refresh()  # what the background lister does
    html = client.get("/admin/nrllm_agents/agentrun/operations/").content.decode()
    assert 'data-mcp-server="ours" data-ok="true"' in html
    assert 'data-mcp-server="broken" data-ok="false"' in html and "unavailable:" in html
