"""A tool's progress reaches watchers live (issue 35): server-everything's long-running operation,
called over stdio, reports ``notifications/progress``; the SSE stream carries them as
``progress`` events (not as the answer's ``delta``), before the tool's step, and the commands
print them. Every test needs ``transaction=True``: the run executes on a thread of its own."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from nrllm_agents.mcp import catalog
from nrllm_agents.mcp.client import hub
from nrllm_agents.testing import mcp_servers
from tests.integration.api.test_stream import frames_of, lines_of, stream_url

from .test_push import in_thread, live_settings  # noqa: F401  (a fixture)

# MCP servers over stdio are child processes
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]

TOOL = "everything__trigger-long-running-operation"
STEPS = 8
SCRIPT = [{"tool_calls": [{"name": TOOL, "arguments": {"duration": 2.4, "steps": STEPS}}]}, {"content": "done"}]


@pytest.fixture
def everything(live_settings):  # noqa: F811
    live_settings.NRLLM_AGENTS = {
        **live_settings.NRLLM_AGENTS,
        "MCP_SERVERS": {"mcpServers": {"everything": mcp_servers.everything()}},
    }
    catalog.forget()
    yield
    hub().close()
    catalog.forget()


def start(runtime, alice) -> tuple[dict[str, Any], threading.Thread]:
    box: dict[str, Any] = {}
    started = threading.Event()

    def run() -> None:
        runtime.run(
            {"prompt": "work", "script": SCRIPT, "tools": [TOOL]},
            owner=alice,
            on_step=lambda step: (box.setdefault("id", step["run_id"]), started.set()),
        )

    thread = in_thread(run)
    assert started.wait(30)
    return box, thread


def test_the_stream_carries_the_tools_progress_as_events_of_their_own(runtime, alice, everything):
    box, thread = start(runtime, alice)
    client = Client()
    client.force_login(alice)
    frames = list(frames_of(lines_of(client.get(stream_url(box["id"]), HTTP_LAST_EVENT_ID="0").streaming_content)))
    thread.join(30)

    events = [f.get("event") for f in frames if "event" in f]
    reports = [json.loads(f["data"]) for f in frames if f.get("event") == "progress"]
    assert len(reports) >= 2, events  # live, in several reports, not once at the end
    assert all("id" not in f for f in frames if f.get("event") == "progress")  # Last-Event-ID names steps only
    assert {r["name"] for r in reports} == {TOOL} and {r["run_id"] for r in reports} == {box["id"]}
    assert all(r["total"] == STEPS for r in reports)
    values = [r["progress"] for r in reports]
    assert values == sorted(values) and values[-1] <= STEPS
    tool_frame = next(f for f in frames if f.get("event") == "step" and json.loads(f["data"])["kind"] == "tool")
    assert all(i < frames.index(tool_frame) for i, f in enumerate(frames) if f.get("event") == "progress")
    call_id = json.loads(tool_frame["data"])["payload"]["call_id"]
    assert {r["call_id"] for r in reports} == {call_id}
    # Progress is not the answer's text: no delta mentions it.
    assert not [f for f in frames if f.get("event") == "delta" and "progress" in f["data"]]
    assert events[-1] == "done"


def test_agent_events_follow_json_prints_progress_lines(runtime, alice, everything, capsys):
    box, thread = start(runtime, alice)
    call_command("agent_events", box["id"], "--follow", "--json")
    thread.join(30)
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    kinds = [line["event"] if line["event"] != "step" else line["step"]["kind"] for line in lines]
    assert kinds.count("progress") >= 2, kinds
    assert kinds.index("progress") < kinds.index("tool")
    report = next(line for line in lines if line["event"] == "progress")
    assert report["name"] == TOOL and report["total"] == STEPS and "kind" not in report
