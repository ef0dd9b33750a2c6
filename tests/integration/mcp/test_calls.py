"""Runs that call tools of real MCP servers over stdio and Streamable HTTP, hostile ones included.

The servers are real processes: the reference ``@modelcontextprotocol/server-everything`` (npm)
and ours (``nrllm_agents.testing.mcp_server``, built with the SDK's server side). Every test
needs ``transaction=True``: the runtime records steps on connections of its own.
"""

from __future__ import annotations

import pytest

from nrllm_agents.domain.idempotency import idempotency_key
from nrllm_agents.executors import dispatch
from nrllm_agents.mcp import catalog
from nrllm_agents.mcp.client import hub
from nrllm_agents.mcp.tool import IDEMPOTENCY_META
from nrllm_agents.models import AgentRunEvent, RunStatus
from nrllm_agents.runtime import segment
from nrllm_agents.runtime.agent_runtime import AgentRuntime, Outcome
from nrllm_agents.testing import mcp_servers

# MCP servers over stdio are child processes
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.processes]


@pytest.fixture
def servers(settings, tmp_path):
    """Configure MCP servers for one test; every server this process started is stopped after it."""

    def configure(**entries):
        settings.NRLLM_AGENTS = {**getattr(settings, "NRLLM_AGENTS", {}), "MCP_SERVERS": {"mcpServers": entries}}
        catalog.forget()

    yield configure
    hub().close()
    catalog.forget()


def run(tools: list[str], *turns: dict, **request) -> tuple[object, list[dict]]:
    script = [*turns, {"content": "done"}]
    result = AgentRuntime().run({"prompt": "p", "tools": tools, "script": script, **request})
    steps = list(AgentRunEvent.objects.filter(run_id=result.run_id).order_by("sequence").values("kind", "payload"))
    return result, steps


def call(name: str, **arguments) -> dict:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def tool_steps(steps: list[dict]) -> list[dict]:
    return [s["payload"] for s in steps if s["kind"] == "tool"]


def test_the_reference_server_over_stdio_is_listed_offered_and_called(servers):
    servers(everything=mcp_servers.everything())
    listing = catalog.refresh()
    assert {"everything__echo", "everything__get-sum", "everything__trigger-long-running-operation"} <= set(
        listing.tools
    )
    result, steps = run(
        ["everything__echo", "everything__trigger-long-running-operation"],
        call("everything__echo", message="hello"),
        call("everything__trigger-long-running-operation", duration=0.3, steps=3),
    )
    assert result.outcome == Outcome.COMPLETED, result
    echo, long = tool_steps(steps)
    assert echo["error"] is None and echo["result"]["text"] == "Echo: hello"
    assert echo["result"]["mcp"] == {"server": "everything", "tool": "echo"}
    assert [p["progress"] for p in long["result"]["progress"]] == [1, 2, 3]
    assert long["result"]["progress"][-1]["total"] == 3


def test_our_server_over_streamable_http_records_structured_content(servers, tmp_path):
    with mcp_servers.HttpServer("ours", record=tmp_path / "rec.jsonl") as server:
        servers(web=server.entry())
        result, steps = run(["web__structured"], call("web__structured", city="Paris"))
    assert result.outcome == Outcome.COMPLETED, result
    (step,) = tool_steps(steps)
    assert step["result"]["structuredContent"] == {"city": "Paris", "temperature": 21.5}
    assert [r["event"] for r in mcp_servers.records(tmp_path / "rec.jsonl")] == ["started"]


def test_the_reference_server_over_streamable_http(servers, tmp_path):
    with mcp_servers.HttpServer("everything", log=tmp_path / "everything.log") as server:
        servers(remote=server.entry())
        result, steps = run(["remote__get-sum"], call("remote__get-sum", a=2, b=3))
    assert result.outcome == Outcome.COMPLETED, result
    assert "5" in tool_steps(steps)[0]["result"]["text"]


def test_bad_arguments_and_iserror_are_tool_errors_the_model_sees(servers, tmp_path):
    servers(ours=mcp_servers.ours(tmp_path / "rec.jsonl"))
    result, steps = run(
        ["ours__echo", "ours__failing"],
        call("ours__echo", text=42),
        call("ours__failing"),
        call("ours__echo", text="still here"),
    )
    assert result.outcome == Outcome.COMPLETED, result
    bad, failing, fine = tool_steps(steps)
    assert "inputSchema at text" in bad["error"]
    assert "reported an error" in failing["error"] and "on purpose" in failing["error"]
    assert fine["result"]["text"] == "still here"
    # The bad arguments never reached the server.
    assert [r["tool"] for r in mcp_servers.records(tmp_path / "rec.jsonl")] == ["failing", "echo"]


def test_hostile_servers_give_clear_tool_errors_and_the_run_goes_on(servers, tmp_path):
    servers(ours=mcp_servers.ours(tmp_path / "rec.jsonl", timeout=2))
    result, steps = run(
        ["ours__huge", "ours__garbage", "ours__silent", "ours__die", "ours__echo"],
        call("ours__huge", chars=3_000_000),
        call("ours__garbage"),
        call("ours__silent"),
        call("ours__die"),
        call("ours__echo", text="after the crash"),
        max_iterations=10,
    )
    assert result.outcome == Outcome.COMPLETED, result
    huge, garbage, silent, died, echo = tool_steps(steps)
    assert "more than the 100000 a result may hold" in huge["error"]
    assert "not valid JSON-RPC" in garbage["error"]
    assert "did not answer within 2 s" in silent["error"]
    assert "closed the connection during the call" in died["error"]
    assert echo["error"] is None and echo["result"]["text"] == "after the crash"
    assert hub().started("ours") == 2  # started again after it died
    assert result.status == RunStatus.COMPLETED


def test_a_destructive_tool_waits_for_approval_by_default(servers, tmp_path):
    servers(ours=mcp_servers.ours(tmp_path / "rec.jsonl"))
    result, steps = run(["ours__erase"], call("ours__erase", target="everything"))
    assert result.outcome == Outcome.AWAITING_APPROVAL, result
    assert mcp_servers.records(tmp_path / "rec.jsonl") == []  # nothing was sent
    approved = AgentRuntime().approve(result.run_id, True)
    assert approved.outcome == Outcome.COMPLETED, approved
    assert [r["tool"] for r in mcp_servers.records(tmp_path / "rec.jsonl")] == ["erase"]


def test_an_unreachable_server_is_named_and_a_run_offering_it_is_refused(servers, tmp_path):
    servers(gone={"type": "http", "url": f"http://127.0.0.1:{mcp_servers.free_port()}/mcp", "connectTimeout": 5})
    rows = catalog.health()
    assert (
        rows[0]["server"] == "gone" and rows[0]["ok"] is False and "could not be started or reached" in rows[0]["error"]
    )
    from nrllm_agents.validation.run_request import InvalidRequest

    with pytest.raises(InvalidRequest, match="MCP server 'gone' is unavailable"):
        AgentRuntime().run({"prompt": "p", "tools": ["gone__anything"], "script": [{"content": "x"}]})


def test_progress_is_shown_live_and_recorded_on_the_step(servers, tmp_path):
    servers(ours=mcp_servers.ours(tmp_path / "rec.jsonl"))
    deltas: list[dict] = []
    result = AgentRuntime().run(
        {
            "prompt": "p",
            "tools": ["ours__slow"],
            "script": [call("ours__slow", seconds=0.3, steps=3), {"content": "done"}],
        },
        on_delta=deltas.append,
    )
    assert result.outcome == Outcome.COMPLETED, result
    reports = [d for d in deltas if d.get("kind") == "progress"]
    assert [(r["name"], r["progress"], r["total"], r["message"]) for r in reports] == [
        ("ours__slow", i, 3, f"step {i} of 3") for i in (1, 2, 3)
    ]
    answer = "".join(d["text"] for d in deltas if d.get("kind") != "progress")
    assert "progress" not in answer  # progress is not the answer's text
    steps = list(AgentRunEvent.objects.filter(run_id=result.run_id, kind="tool").values_list("payload", flat=True))
    assert [p["progress"] for p in steps[0]["result"]["progress"]] == [1, 2, 3]


def test_a_hostile_server_over_streamable_http_gives_clear_tool_errors(servers, tmp_path):
    with mcp_servers.HttpServer("ours", record=tmp_path / "rec.jsonl") as server:
        servers(web=server.entry(timeout=2))
        result, steps = run(
            ["web__huge", "web__silent", "web__die", "web__echo"],
            call("web__huge", chars=3_000_000),
            call("web__silent"),
            call("web__die"),
            call("web__echo", text="the server is gone"),
            max_iterations=10,
        )
    assert result.outcome == Outcome.COMPLETED, result
    huge, silent, died, gone = tool_steps(steps)
    assert "dropped the call" in huge["error"]  # past the SDK's bound on one streamed event
    assert "did not answer within 2 s" in silent["error"]
    print(died["error"], "|", gone["error"])
    assert "dropped the call" in died["error"]
    assert "could not be started or reached" in gone["error"]


def test_a_call_repeated_after_a_hand_back_sends_the_same_idempotency_key_in_meta(servers, tmp_path, monkeypatch):
    """The first worker shuts down once the server reports progress (the call is cut short and
    not recorded); the next one repeats the call. The server receives the same key both times."""
    monkeypatch.setattr(dispatch, "dispatch", lambda run_id, **kwargs: None)  # this test is the worker
    record = tmp_path / "rec.jsonl"
    script = [call("web__slow", seconds=0.6, steps=3), {"content": "done"}]

    def shut_down_at_the_first_progress(delta):
        if delta.get("kind") == "progress":
            segment.hand_back_all()

    with mcp_servers.HttpServer("ours", record=record) as server:
        servers(web=server.entry())
        run_id = AgentRuntime().enqueue({"prompt": "p", "tools": ["web__slow"], "script": script})
        try:
            handed = AgentRuntime().run_queued(run_id, on_delta=shut_down_at_the_first_progress)
        finally:
            segment.shutdown_requested.clear()
        assert handed.outcome == Outcome.REQUEUED, handed
        done = AgentRuntime().run_queued(run_id)
    assert done.outcome == Outcome.COMPLETED, done
    events = mcp_servers.records(record)
    assert [e["event"] for e in events if e["event"] != "progress"] == ["started", "cancelled", "started", "finished"]
    sent = [e["meta"].get(IDEMPOTENCY_META) for e in events if e["event"] == "started"]
    assert sent == [idempotency_key(run_id, 1, "call_1_1")] * 2
    assert len(tool_steps(list(AgentRunEvent.objects.filter(run_id=run_id).values("kind", "payload")))) == 1
