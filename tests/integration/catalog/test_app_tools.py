"""Typed tools in an installed app's ``agent_tools`` module are found at start-up with no
settings edit, offered and run like any tool; a name offered twice is a system check error."""

from __future__ import annotations

import pytest
from django.conf import settings as django_settings
from django.test import override_settings

from nrllm_agents import checks
from nrllm_agents.catalog import app_tools, registry
from nrllm_agents.runtime.agent_runtime import AgentRuntime

ALPHA = "tests.integration.catalog.toolapps.alpha"
BETA = "tests.integration.catalog.toolapps.beta"


@pytest.fixture
def installed():
    """Installs apps for the test, as start-up would find them; the tools go with the apps."""
    overrides: list[override_settings] = []

    def install(*apps: str) -> None:
        overrides.append(override_settings(INSTALLED_APPS=[*django_settings.INSTALLED_APPS, *apps]))
        overrides[-1].enable()
        app_tools.discover()

    yield install
    for override in reversed(overrides):
        override.disable()
    app_tools.discover()


def test_an_apps_tools_are_found_offered_and_built(installed) -> None:
    assert app_tools.get("shout") is None
    installed(ALPHA)
    assert app_tools.tools()["shout"].module == f"{ALPHA}.agent_tools"
    assert "shout" in registry.tool_names() and registry.is_known_tool("shout")
    entries, _ = registry.offered_tools()
    (entry,) = [e for e in entries if e["name"] == "shout"]
    assert (entry["source"], entry["description"]) == ("app", "Say it louder.")
    built = registry.build_tools(["shout"])
    assert built["shout"].execute({"text": "hi", "times": 2}) == "HI! HI! "


@pytest.mark.django_db
def test_a_run_calls_an_apps_tool_and_a_bad_argument_is_a_tool_error(installed) -> None:
    installed(ALPHA)
    script = [
        {"tool_calls": [{"name": "shout", "arguments": {"text": 5, "loud": True}}]},
        {"tool_calls": [{"name": "shout", "arguments": {"text": "hey"}}]},
        {"content": "done"},
    ]
    result = AgentRuntime().run({"prompt": "shout", "tools": ["shout"], "script": script})
    assert (result.status, result.final_text) == ("completed", "done")
    tools = [e.payload for e in AgentRuntime().events(result.run_id) if e.kind == "tool"]
    assert "invalid arguments for shout" in str(tools[0]) and "loud: Extra inputs" in str(tools[0])
    assert "HEY!" in str(tools[1])


def test_the_playground_lists_the_project_s_tools_first_as_its_own(installed) -> None:
    """Issue 48: an app's tools were labelled "Built-in", and came last (out of view)."""
    from nrllm_agents.web.forms import tool_groups

    installed(ALPHA)
    groups = tool_groups()
    assert [(g["label"], g["open"]) for g in groups[:2]] == [("Your project's tools", True), ("Built-in", True)]
    assert "shout" in [t["name"] for t in groups[0]["tools"]]
    assert "shout" not in [t["name"] for t in groups[1]["tools"]]


def test_a_name_offered_twice_is_a_check_error_naming_both(installed) -> None:
    assert checks.check_tool_names() == []
    installed(ALPHA, BETA)
    errors = checks.check_tool_names()
    assert {e.id for e in errors} == {"nrllm_agents.E023"}
    messages = sorted(e.msg for e in errors)
    assert messages == [
        f"two tools are named 'calculator': @tool in {ALPHA}.agent_tools and NRLLM_AGENTS['TOOLS'] "
        "(nrllm_agents.tools.calculator_tool)",
        f"two tools are named 'shout': @tool in {ALPHA}.agent_tools and @tool in {BETA}.agent_tools",
    ]
    # until it is fixed, the settings' tool and the first app's are the ones offered
    assert registry.build_tools(["calculator"])["calculator"].execute({"expression": "1+1"})["value"] == 2
    assert registry.build_tools(["shout"])["shout"].execute({"text": "a"}) == "A! "


def test_a_clash_with_an_mcp_tool_is_named(installed, monkeypatch) -> None:
    from nrllm_agents.mcp import catalog as mcp_catalog

    installed(ALPHA)
    monkeypatch.setattr(mcp_catalog, "configured", lambda: True)
    monkeypatch.setattr(mcp_catalog, "listed_servers", lambda: {"shout": "loud", "other__tool": "other"})
    (error,) = [e for e in checks.check_tool_names() if "shout" in e.msg]
    assert error.msg == (
        f"two tools are named 'shout': @tool in {ALPHA}.agent_tools and a tool of the MCP server 'loud'"
    )
