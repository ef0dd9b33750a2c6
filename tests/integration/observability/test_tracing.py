"""Runs traced in OpenTelemetry's GenAI conventions, through the SDK with an in-memory exporter.

The tracer provider is the real SDK's, installed for this module only (``tracing.install``), so
the process's own provider stays unset for every other test. ``transaction=True``: a cancel and
the run it stops are on two threads, each with its own connection.
"""

from __future__ import annotations

import threading
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from nrllm_agents.catalog import agents as catalog
from nrllm_agents.catalog import connections
from nrllm_agents.conf import app_settings
from nrllm_agents.models import AgentRun, AgentRunEvent
from nrllm_agents.money import pricing
from nrllm_agents.observability import spans as segment_spans
from nrllm_agents.observability import tracing
from nrllm_agents.runtime.agent_runtime import Outcome
from nrllm_agents.store.results import Operator
from nrllm_agents.testing.chat_server import ChatCompletionServer
from tests import waits
from tests.integration.executors.test_queue import no_redis  # noqa: F401  (fixture)
from tests.integration.runtime.test_in_doubt import charge, lost_in_doubt  # noqa: F401  (fixture)

# Once, on PostgreSQL: nothing here differs on SQLite.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres_only]

CALC = {"name": "calculator", "arguments": {"expression": "6 * 7"}}
TOOL_THEN_ANSWER = {
    "prompt": "what is six times seven?",
    "tools": ["calculator"],
    "script": [{"tool_calls": [CALC], "usage": {"prompt_tokens": 12, "completion_tokens": 3}}, {"content": "42"}],
}


@pytest.fixture
def exported():
    """Spans finished by our tracer (an SDK provider of this test's own); ``provider`` starts others."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    exporter.provider = provider  # type: ignore[attr-defined]
    yield exporter
    tracing.uninstall()
    provider.shutdown()


def by_name(finished: Any) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for span in finished:
        found.setdefault(span.name.split(" ", 1)[0], []).append(span)
    return found


def test_a_run_is_an_invoke_agent_span_with_a_chat_span_per_call_and_an_execute_tool_span(runtime, exported):
    result = runtime.run(TOOL_THEN_ANSWER)
    assert result.outcome == Outcome.COMPLETED
    found = by_name(exported.get_finished_spans())
    (run,) = found["invoke_agent"]
    chats, (tool,) = found["chat"], found["execute_tool"]
    assert len(chats) == 2
    assert {s.parent.span_id for s in [*chats, tool]} == {run.context.span_id}
    assert {s.context.trace_id for s in [*chats, tool]} == {run.context.trace_id}
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes["gen_ai.provider.name"] == "scripted"
    assert run.attributes["nrllm.run.id"] == str(result.run_id)
    assert run.attributes["nrllm.run.outcome"] == "completed"
    assert run.attributes["gen_ai.usage.input_tokens"] == 12 and run.attributes["gen_ai.usage.output_tokens"] == 3
    first = min(chats, key=lambda s: s.start_time)
    assert first.name == "chat scripted-demo" and first.kind == trace.SpanKind.CLIENT
    assert first.attributes["gen_ai.request.model"] == "scripted-demo"
    assert first.attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert (first.attributes["gen_ai.usage.input_tokens"], first.attributes["gen_ai.usage.output_tokens"]) == (12, 3)
    assert tool.name == "execute_tool calculator"
    assert tool.attributes["gen_ai.tool.name"] == "calculator"
    assert tool.attributes["gen_ai.tool.call.id"] == "call_1_1"
    # In order, and each inside the run's span.
    assert run.start_time <= first.start_time <= first.end_time <= tool.start_time <= tool.end_time <= run.end_time
    # No message content unless asked for.
    assert not any(k.endswith(("messages", "arguments", "result")) for s in chats + [tool] for k in s.attributes)


def test_a_saved_agent_s_run_names_its_agent_and_version_and_prices_each_call(runtime, exported):
    pricing.set_price(
        model="scripted-demo", provider="scripted", input_per_million=Decimal("2.5"), output_per_million=Decimal(10)
    )
    script = [{"content": "hi", "usage": {"prompt_tokens": 1000, "completion_tokens": 100}}]
    catalog.save("greeter", {"provider": "scripted", "script": [{"content": "v1"}], "tools": []}, description="greets")
    catalog.save("greeter", {"provider": "scripted", "script": script, "tools": []}, description="greets")
    result = runtime.run({"agent": "greeter", "prompt": "hello"})  # version 2: its row's id is not the agent's
    assert result.outcome == Outcome.COMPLETED
    found = by_name(exported.get_finished_spans())
    (run,), (chat,) = found["invoke_agent"], found["chat"]
    run_row = AgentRun.objects.select_related("agent_version").get(pk=result.run_id)
    assert run.name == "invoke_agent greeter"
    assert (run.attributes["gen_ai.agent.name"], run.attributes["gen_ai.agent.version"]) == ("greeter", "2")
    assert run_row.agent_version.agent_id != run_row.agent_version_id
    assert run.attributes["gen_ai.agent.id"] == str(run_row.agent_version.agent_id)
    # 1000 x 2.5 + 100 x 10 per million = 0.0035: exact decimal text on the call and on the run
    for span in (run, chat):
        assert span.attributes["nrllm.cost.amount"] == "0.0035" and "nrllm.cost.estimated" not in span.attributes
        assert span.attributes["nrllm.cost.currency"] == app_settings.CURRENCY
    assert run_row.cost == Decimal("0.0035")


def test_message_contents_only_when_the_opt_in_variable_asks_and_scrubbed_like_errors(runtime, exported, monkeypatch):
    monkeypatch.setenv(tracing.CAPTURE_CONTENT, "true")
    secret = "sk-live-4f9a8b7c6d5e4f3a2b1c"
    result = runtime.run({**TOOL_THEN_ANSWER, "prompt": f"my key is {secret}; what is six times seven?"})
    assert result.outcome == Outcome.COMPLETED
    found = by_name(exported.get_finished_spans())
    first = min(found["chat"], key=lambda s: s.start_time)
    sent = first.attributes["gen_ai.input.messages"]
    assert '"role": "user"' in sent and "what is six times seven?" in sent
    assert secret not in sent and "[redacted]" in sent
    assert '"type": "tool_call"' in first.attributes["gen_ai.output.messages"]
    (tool,) = found["execute_tool"]
    assert tool.attributes["gen_ai.tool.call.arguments"] == '{"expression": "6 * 7"}'
    assert tool.attributes["gen_ai.tool.call.result"] == '{"expression": "6 * 7", "value": 42}'


def test_with_no_provider_the_step_path_does_no_tracing_work(runtime, monkeypatch):
    """Tracing installed but off: no spans object, no carrier for the loop, no header built."""
    tracing.install(None)
    try:
        made: list[Any] = []
        monkeypatch.setattr(segment_spans, "SegmentSpans", lambda *a, **k: made.append(a))
        monkeypatch.setattr(tracing, "carrier", lambda *a, **k: made.append(a) or {})
        from nrllm_agents.domain import loop

        carriers: list[Any] = []
        original = loop.ToolLoop.__init__

        def spy(self, *args, **kwargs):
            carriers.append(kwargs.get("carrier"))
            original(self, *args, **kwargs)

        monkeypatch.setattr(loop.ToolLoop, "__init__", spy)
        result = runtime.run(TOOL_THEN_ANSWER)
        assert result.outcome == Outcome.COMPLETED
        assert made == [] and carriers == [None]
        assert AgentRun.objects.get(pk=result.run_id).trace_context is None
    finally:
        tracing.uninstall()


def test_a_queued_run_continues_the_trace_it_was_created_in_across_its_segments(runtime, exported):
    """Enqueued inside a request's span: its row keeps that context; the segment that executes
    it, and the one that resumes it after an approval, are children of it in its trace."""
    request_tracer = exported.provider.get_tracer("host")
    script = [{"tool_calls": [{"name": "write_note", "arguments": {"title": "t", "body": "b"}}]}, {"content": "ok"}]
    with request_tracer.start_as_current_span("POST /api/runs/") as request_span:
        run_id = runtime.enqueue({"prompt": "note", "tools": ["write_note"], "script": script}, wake=False)
    stored = AgentRun.objects.get(pk=run_id).trace_context
    assert stored["traceparent"].split("-")[1:3] == [
        format(request_span.get_span_context().trace_id, "032x"),
        format(request_span.get_span_context().span_id, "016x"),
    ]
    assert runtime.run_queued(run_id).outcome == Outcome.AWAITING_APPROVAL  # write_note is gated
    with request_tracer.start_as_current_span("POST /api/runs/approve/") as approving:
        assert runtime.approve(run_id, True, by=Operator("carol"), reason="checked").outcome == Outcome.COMPLETED
    segments = sorted(by_name(exported.get_finished_spans())["invoke_agent"], key=lambda s: s.start_time)
    [decided] = [e for e in segments[-1].events if e.name == "nrllm.approval"]
    assert dict(decided.attributes) == {
        "nrllm.approval.approved": True,
        "nrllm.approval.by": "carol",
        "nrllm.approval.reason": "checked",
    }
    assert len(segments) == 2
    assert {s.context.trace_id for s in segments} == {request_span.get_span_context().trace_id}
    assert {s.parent.span_id for s in segments} == {request_span.get_span_context().span_id}
    assert [s.attributes["nrllm.segment.kind"] for s in segments] == ["worker", "resume"]
    assert segments[0].attributes["nrllm.run.outcome"] == "awaiting_approval"
    # The approving request is another trace: linked, not the parent.
    assert [link.context.span_id for link in segments[1].links] == [approving.get_span_context().span_id]


def test_a_run_created_with_no_span_current_keeps_its_first_segments_context(runtime, exported):
    run_id = runtime.enqueue({"prompt": "p", "tools": ["write_note"], "script": [{"content": "x"}]}, wake=False)
    assert AgentRun.objects.get(pk=run_id).trace_context is None
    runtime.run_queued(run_id)
    (segment,) = by_name(exported.get_finished_spans())["invoke_agent"]
    assert segment.parent is None
    kept = AgentRun.objects.get(pk=run_id).trace_context["traceparent"]
    assert kept.split("-")[2] == format(segment.context.span_id, "016x")


def test_a_run_cancelled_during_a_model_call_ends_both_spans_as_cancelled_with_the_cancel_event(
    runtime, exported, alice
):
    request = {"prompt": "write a lot", "script": [{"content": "word " * 400, "delay": 30}]}
    results: list[Any] = []
    worker = threading.Thread(target=lambda: results.append(runtime.run(request)))
    worker.start()
    deadline = time.monotonic() + 30
    run = None
    while run is None and time.monotonic() < deadline:  # the request step is recorded before the call
        run = AgentRunEvent.objects.filter(kind="request").values_list("run_id", flat=True).first()
        time.sleep(0.02)
    assert run is not None
    runtime.cancel(run, by=alice, source="api", reason="took too long")
    worker.join(30)
    assert results and results[0].outcome == Outcome.CANCELLED
    found = by_name(exported.get_finished_spans())
    (segment,), (chat,) = found["invoke_agent"], found["chat"]
    for span in (segment, chat):
        assert span.status.status_code == trace.StatusCode.ERROR
        assert span.attributes["error.type"] == "cancelled"
        assert span.attributes["nrllm.cancel.source"] == "api"
        assert span.attributes["nrllm.cancel.by"] == "alice"
        assert span.attributes["nrllm.cancel.reason"] == "took too long"
    assert chat.attributes["nrllm.step.interrupted"] is True
    (event,) = [e for e in segment.events if e.name == segment_spans.CANCEL_EVENT]
    requested = AgentRun.objects.get(pk=run).cancel_requested_at
    assert event.timestamp == int(requested.timestamp() * 1e9)
    assert chat.start_time < event.timestamp <= segment.end_time


def test_a_sub_agents_run_is_a_child_of_its_parents_one_execute_tool_span(runtime, exported, no_redis):  # noqa: F811
    """The parent's segment that starts the child run holds the call's only ``execute_tool``
    span; the child's ``invoke_agent`` span is its child, in the same trace, and the segment
    that resumes the parent records the answer as an event, not as a second span."""
    catalog.save("helper", {"provider": "scripted", "script": [{"content": "helped"}], "tools": []})
    ask = {"tool_calls": [{"name": "helper", "arguments": {"prompt": "help"}}]}
    boss = {"provider": "scripted", "script": [ask, {"content": "done"}], "tools": [], "agents": ["helper"]}
    catalog.save("boss", boss)
    root_id = runtime.enqueue({"agent": "boss", "prompt": "delegate"})
    assert waits.wait_local_idle(60)
    assert AgentRun.objects.get(pk=root_id).final_text == "done"
    child = AgentRun.objects.get(tree_parent_id=root_id)
    found = by_name(exported.get_finished_spans())
    (tool,) = found["execute_tool"]  # one span for the call, none for the resumed segment's answer
    assert tool.name == "execute_tool helper"
    assert tool.attributes["gen_ai.tool.call.id"] == child.tree_call_id
    assert tool.attributes[segment_spans.SUB_AGENT_RUN] == str(child.pk)
    assert tool.status.status_code == trace.StatusCode.UNSET
    (child_span,) = [s for s in found["invoke_agent"] if s.attributes["nrllm.run.id"] == str(child.pk)]
    assert child_span.parent.span_id == tool.context.span_id
    assert child_span.context.trace_id == tool.context.trace_id
    first, resumed = sorted(
        (s for s in found["invoke_agent"] if s.attributes["nrllm.run.id"] == str(root_id)), key=lambda s: s.start_time
    )
    assert tool.parent.span_id == first.context.span_id and first.attributes["nrllm.run.outcome"] == "awaiting_children"
    assert first.start_time <= tool.start_time <= tool.end_time <= first.end_time
    assert resumed.context.trace_id == tool.context.trace_id
    (answered,) = [e for e in resumed.events if e.name == segment_spans.ANSWERED_EVENT]
    assert answered.attributes[segment_spans.SUB_AGENT_RUN] == str(child.pk)
    assert answered.attributes["gen_ai.tool.call.id"] == child.tree_call_id
    assert "error.type" not in answered.attributes


def test_a_provider_http_call_carries_the_chat_spans_traceparent(runtime, exported):
    with ChatCompletionServer([{"tool_calls": [CALC]}, {"content": "42"}], by_turn=True) as server:
        connections.save("traced", kind="openai", base_url=server.base_url, default_model="gpt-x")
        result = runtime.run({"prompt": "p", "connection": "traced", "tools": ["calculator"]})
    assert result.outcome == Outcome.COMPLETED, result
    chats = sorted(by_name(exported.get_finished_spans())["chat"], key=lambda s: s.start_time)
    sent = [h.get("traceparent", "").split("-")[1:3] for h in server.request_headers]
    assert sent == [[f"{s.context.trace_id:032x}", f"{s.context.span_id:016x}"] for s in chats]
    assert chats[0].attributes["gen_ai.provider.name"] == "openai"
    assert chats[0].attributes["gen_ai.response.model"] == "gpt-x"


def test_trace_context_round_trips_and_a_broken_one_is_no_parent():
    assert tracing.context_from({"traceparent": "not a traceparent"}) is None
    assert tracing.context_from(None) is None and tracing.context_from({}) is None
    traceparent = f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01"
    ctx = tracing.context_from({"traceparent": traceparent})
    assert ctx is not None and tracing.carrier(ctx)["traceparent"] == traceparent


@pytest.fixture
def mcp_server(settings, tmp_path):
    """Our recording MCP server over stdio for one test (``ours__*`` tools); stopped after it."""
    from nrllm_agents.mcp import catalog
    from nrllm_agents.mcp.client import hub
    from nrllm_agents.testing import mcp_servers

    record = tmp_path / "mcp.jsonl"
    settings.NRLLM_AGENTS = {
        **getattr(settings, "NRLLM_AGENTS", {}),
        "MCP_SERVERS": {"mcpServers": {"ours": mcp_servers.ours(record)}},
    }
    catalog.forget()
    yield lambda: mcp_servers.records(record)
    hub().close()
    catalog.forget()


@pytest.mark.processes
def test_an_mcp_call_carries_the_tool_spans_context_in_its_meta(runtime, exported, mcp_server):
    script = [{"tool_calls": [{"name": "ours__echo", "arguments": {"text": "hi"}}]}, {"content": "done"}]
    result = runtime.run({"prompt": "p", "tools": ["ours__echo"], "script": script})
    assert result.outcome == Outcome.COMPLETED, result
    (tool,) = by_name(exported.get_finished_spans())["execute_tool"]
    (started,) = [r for r in mcp_server() if r["event"] == "started"]
    assert started["meta"]["traceparent"].split("-")[1:3] == [
        f"{tool.context.trace_id:032x}",
        f"{tool.context.span_id:016x}",
    ]


@pytest.mark.processes
def test_an_mcp_tool_sends_the_context_it_is_handed_in_meta_with_no_span_current(mcp_server):
    """The trace context travels explicitly (``CallContext.headers``), not only through the
    SDK's own look at the current span: a tool called with no span current still sends it."""
    from nrllm_agents.domain.cancel import CallContext
    from nrllm_agents.mcp import catalog

    traceparent = f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01"
    tool = catalog.tool("ours__echo")
    assert tool is not None
    tool.execute({"text": "hi"}, context=CallContext(headers={"traceparent": traceparent}))
    (started,) = [r for r in mcp_server() if r["event"] == "started"]
    assert started["meta"]["traceparent"] == traceparent


REGISTRY = Path(__file__).with_name("genai_registry.txt")


def registry() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for line in REGISTRY.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            kind, name = line.split()
            found.setdefault(kind, set()).add(name)
    return found


def test_every_emitted_name_is_the_conventions_or_ours(runtime, exported, monkeypatch):
    """Against the conventions' published registry (the names we use, vendored with their commit):
    every ``gen_ai.*`` attribute and ``error.type`` is registered, every other name is ours
    (``nrllm.*``), and each span is named ``{gen_ai.operation.name} {what}``."""
    monkeypatch.setenv(tracing.CAPTURE_CONTENT, "true")
    runtime.run(TOOL_THEN_ANSWER)
    runtime.run({"prompt": "p", "tools": ["calculator"], "script": [{"tool_calls": [{"name": "calculator"}]}]})  # fails
    finished = exported.get_finished_spans()
    names = registry()
    emitted = {k for s in finished for k in s.attributes}
    emitted |= {k for s in finished for e in s.events for k in e.attributes}
    ours = {k for k in emitted if k.startswith("nrllm.")}
    assert emitted - ours <= names["attribute"], sorted(emitted - ours - names["attribute"])
    operations = {s.attributes["gen_ai.operation.name"] for s in finished}
    assert operations == names["operation"]
    assert all(s.name.split(" ", 1)[0] == s.attributes["gen_ai.operation.name"] for s in finished)
    assert {e.name for s in finished for e in s.events} <= {segment_spans.CANCEL_EVENT, "nrllm.approval"}


def test_a_call_in_doubt_is_an_interrupt_and_its_decision_an_approval_event(runtime, exported, charge):  # noqa: F811
    """The segment that suspends a run in doubt ends with an ``nrllm.interrupt`` event naming the
    call; the decision's segment records it on its ``nrllm.approval`` event (issue 47)."""
    run_id = lost_in_doubt(runtime)
    suspended = [
        s for s in exported.get_finished_spans() if any(e.name == segment_spans.INTERRUPT_EVENT for e in s.events)
    ]
    (event,) = [e for e in suspended[-1].events if e.name == segment_spans.INTERRUPT_EVENT]
    assert dict(event.attributes) == {
        "nrllm.interrupt.kind": "in_doubt",
        "gen_ai.tool.name": "charge",
        "gen_ai.tool.call.id": "call_1_1",
    }
    runtime.resolve(run_id, True, result="ok", reason="seen")
    approvals = [e for s in exported.get_finished_spans() for e in s.events if e.name == "nrllm.approval"]
    assert approvals[-1].attributes["nrllm.approval.in_doubt"] == "happened"
    assert approvals[-1].attributes["nrllm.approval.reason"] == "seen"
