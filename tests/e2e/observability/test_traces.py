"""Acceptance: traces from real processes to a real OTLP/HTTP receiver, in the GenAI conventions.

A host's web server (gunicorn, its requests traced by ``opentelemetry-instrumentation-django``)
takes ``POST /api/runs/``; a real ``rqworker`` executes the run against the shipped
chat-completions server (and our recording MCP server); both export over OTLP/HTTP to the
receiver on loopback, which decodes what arrives with ``opentelemetry-proto``. The test process
itself traces nothing. ``transaction=True``: the server and the worker are other processes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests
from rest_framework.authtoken.models import Token

from nrllm_agents.catalog import connections
from nrllm_agents.models import AgentRun
from nrllm_agents.testing import mcp_servers
from nrllm_agents.testing.chat_server import ChatCompletionServer
from nrllm_agents.testing.otlp_receiver import OtlpReceiver
from tests.e2e.processes import Workers, wait_for
from tests.e2e.web.servers import serve

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres_only, pytest.mark.slow]

CALC = {"name": "calculator", "arguments": {"expression": "6 * 7"}}
ECHO = {"name": "ours__echo", "arguments": {"text": "hi"}}


def children(spans: list[dict[str, Any]], parent: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted((s for s in spans if s["parent_span_id"] == parent["span_id"]), key=lambda s: s["start"])


def run_of(spans: list[dict[str, Any]], run_id: str) -> dict[str, Any] | None:
    """The run's ``invoke_agent`` span, once it arrived."""
    return next(
        (s for s in spans if s["attributes"].get("nrllm.run.id") == run_id and s["name"] == "invoke_agent"), None
    )


@pytest.fixture
def mcp_listed(settings, tmp_path):
    """Our recording MCP server configured here too (a queued run names its tools); stopped after."""
    from nrllm_agents.mcp import catalog
    from nrllm_agents.mcp.client import hub

    entry = mcp_servers.ours(tmp_path / "mcp.jsonl")
    settings.NRLLM_AGENTS = {**getattr(settings, "NRLLM_AGENTS", {}), "MCP_SERVERS": {"mcpServers": {"ours": entry}}}
    catalog.forget()
    catalog.refresh()
    yield entry
    hub().close()
    catalog.forget()


def test_a_run_from_a_request_to_its_worker_model_calls_tool_and_mcp_server_is_one_trace(
    child_env, redis_url, tmp_path, django_user_model, queue, mcp_listed, runtime
):
    user = django_user_model.objects.create_user("alice")
    api = requests.Session()
    api.headers["Authorization"] = f"Token {Token.objects.create(user=user).key}"
    record = tmp_path / "mcp.jsonl"
    mcp_config = tmp_path / "mcp.json"
    mcp_config.write_text(json.dumps({"mcpServers": {"ours": mcp_listed}}))
    script = [
        {"tool_calls": [CALC], "usage": {"prompt_tokens": 20, "completion_tokens": 5}},
        {"content": "42", "usage": {"prompt_tokens": 30, "completion_tokens": 2}},
        {"tool_calls": [ECHO]},
        {"content": "echoed"},
        {"content": "word " * 300, "chunk_delay": 0.1},  # streams for 30 s: only a cancel ends it early
    ]
    with OtlpReceiver() as receiver, ChatCompletionServer(script) as model:
        connections.save("vendor", kind="openai", base_url=model.base_url, default_model="gpt-x")
        traced = {
            **child_env,
            "REDIS_URL": redis_url,
            "NRLLM_MCP_CONFIG": str(mcp_config),
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }
        web_env = {**traced, "OTEL_SERVICE_NAME": "host-web"}
        worker_env = {**traced, "OTEL_SERVICE_NAME": "nrllm-worker"}
        with (
            serve("gunicorn", web_env, tmp_path, app="tests.e2e.observability.traced_wsgi") as base,
            Workers(worker_env, count=1, log_dir=tmp_path / "workers"),
        ):

            def create(tools: list[str]) -> str:
                answer = api.post(f"{base}/api/runs/", json={"prompt": "p", "connection": "vendor", "tools": tools})
                assert answer.status_code == 202, answer.text
                return str(answer.json()["run_id"])

            # 1. A tool, then the answer: the request's span, invoke_agent, two chats, execute_tool.
            first = create(["calculator"])
            segment = receiver.wait_for(lambda spans: run_of(spans, first), timeout=60)
            spans = receiver.wait_for(lambda spans: len(children(receiver.trace(segment["trace_id"]), segment)) >= 3)
            spans = receiver.trace(segment["trace_id"])
            (request,) = [s for s in spans if s["span_id"] == segment["parent_span_id"]]
            assert request["service"] == "host-web" and request["kind"] == "server"
            assert request["attributes"].get("http.request.method", request["attributes"].get("http.method")) == "POST"
            assert segment["service"] == "nrllm-worker"
            assert segment["attributes"]["gen_ai.operation.name"] == "invoke_agent"
            assert segment["attributes"]["gen_ai.provider.name"] == "openai"
            assert segment["attributes"]["gen_ai.request.model"] == "gpt-x"
            assert (
                segment["attributes"]["gen_ai.usage.input_tokens"],
                segment["attributes"]["gen_ai.usage.output_tokens"],
            ) == (50, 7)
            chat1, tool, chat2 = children(spans, segment)
            assert [chat1["name"], tool["name"], chat2["name"]] == [
                "chat gpt-x",
                "execute_tool calculator",
                "chat gpt-x",
            ]
            assert chat1["kind"] == "client" and chat1["attributes"]["gen_ai.response.model"] == "gpt-x"
            assert chat1["attributes"]["gen_ai.response.finish_reasons"] == ["tool_calls"]
            assert (
                chat1["attributes"]["gen_ai.usage.input_tokens"],
                chat1["attributes"]["gen_ai.usage.output_tokens"],
            ) == (20, 5)
            assert tool["attributes"]["gen_ai.tool.name"] == "calculator" and tool["attributes"]["gen_ai.tool.call.id"]
            assert chat2["attributes"]["gen_ai.response.finish_reasons"] == ["stop"]
            sent = [h["traceparent"].split("-")[1:3] for h in model.request_headers[:2]]
            assert sent == [[chat1["trace_id"], chat1["span_id"]], [chat2["trace_id"], chat2["span_id"]]]

            # 2. An MCP call carries the trace to the server, in the request's _meta (the REST API
            # offers no MCP tool: queued from here, where nothing traces, the worker's span is a root).
            second = str(runtime.enqueue({"prompt": "p", "connection": "vendor", "tools": ["ours__echo"]}))
            segment = receiver.wait_for(lambda spans: run_of(spans, second), timeout=60)
            (tool,) = [
                s
                for s in children(receiver.trace(segment["trace_id"]), segment)
                if s["name"].startswith("execute_tool")
            ]
            (started,) = [r for r in mcp_servers.records(record) if r["event"] == "started"]
            trace_id, parent_id = started["meta"]["traceparent"].split("-")[1:3]
            assert trace_id == segment["trace_id"]
            # the parent is our tool span, or the MCP SDK's own client span inside it
            within = {tool["span_id"]} | {
                s["span_id"] for s in receiver.trace(trace_id) if s["parent_span_id"] == tool["span_id"]
            }
            assert parent_id in within

            # 3. A run cancelled during a model call: both spans end as cancelled, with the event.
            third = create([])
            wait_for(lambda: len(model.requests) == 5, what="the third run's model call to start")
            cancelled = api.post(f"{base}/api/runs/{third}/cancel/", json={"reason": "took too long"})
            assert cancelled.status_code in (200, 202), cancelled.text
            segment = receiver.wait_for(lambda spans: run_of(spans, third), timeout=60)
            (chat,) = children(receiver.trace(segment["trace_id"]), segment)
            row = AgentRun.objects.get(pk=third)
            assert row.status == "cancelled"
            for span in (segment, chat):
                assert span["status"]["code"] == "error"
                assert span["attributes"]["error.type"] == "cancelled"
                assert span["attributes"]["nrllm.cancel.source"] == "api"
                assert span["attributes"]["nrllm.cancel.by"] == "alice"
                assert span["attributes"]["nrllm.cancel.reason"] == "took too long"
            assert chat["attributes"]["nrllm.step.interrupted"] is True
            (event,) = [e for e in segment["events"] if e["name"] == "nrllm.cancel"]
            assert event["time"] == int(row.cancel_requested_at.timestamp() * 1e9)
            assert chat["start"] < event["time"] <= chat["end"] <= segment["end"]
            assert not receiver.refused, receiver.refused
