"""A cancel from another process cuts an anthropic or gemini answer mid-stream.

``agent_run`` (a child process) streams a slow answer from the loopback server through the real
SDK; this process commits the cancel. The server records when the client closed the connection,
which is counted from ``cancel_requested_at`` (taken before the commit, so the bound holds for
the commit too) and checked against a generous bound: the latency itself is measured by
``bench/cancel_latency.py`` (tens of ms), never asserted by a test on a loaded machine. The
partial text and the usage are on the interrupted step.
"""

from __future__ import annotations

import pytest

from nrllm_agents.models import AgentRun, AgentRunEvent, RunStatus
from tests.e2e.live.test_interrupt_processes import SLOW_ANSWER, cut_off_mid_stream
from tests.integration.providers.test_native_providers import ENV, KINDS, server_class

# The cancel reaches the child by NOTIFY on PostgreSQL; on SQLite only by the poll (a second).
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres_only]

CLOSE_WITHIN = 1.0  # seconds from the cancel to the server seeing the connection closed: generous


@pytest.mark.parametrize("kind", KINDS)
def test_a_cancel_from_another_process_closes_the_connection_mid_stream(kind: str, child_env) -> None:
    key_variable, url_variable = ENV[kind]
    with server_class(kind)([SLOW_ANSWER], api_key="e2e-key-0001", by_turn=True) as server:
        env = {**child_env, key_variable: "e2e-key-0001", url_variable: server.base_url}
        run_id, deltas, _, (returncode, out, err) = cut_off_mid_stream(server, env, "--provider", kind)
        assert returncode == 3, (out, err)
        log = server.streams[0]
        assert not log.finished and log.disconnected_at is not None
    run = AgentRun.objects.get(pk=run_id)
    latency = log.disconnected_at - run.cancel_requested_at.timestamp()
    assert latency < CLOSE_WITHIN, f"the connection closed {latency * 1000:.1f} ms after the cancel"
    assert not [t for t, _ in log.sent if t > log.disconnected_at]
    events = list(AgentRunEvent.objects.filter(run_id=run_id).order_by("sequence"))
    assert [e.kind for e in events] == ["request", "llm", "cancelled"]
    llm = events[1].payload
    assert llm["interrupted"] is True and llm["content"]
    assert SLOW_ANSWER["content"].startswith(llm["content"])
    assert llm["content"].startswith("".join(d["text"] for d in deltas))
    assert llm["usage"]["completion_tokens"] > 0 and llm["usage_estimated"] is True
    if kind == "anthropic":  # message_start had counted the input exactly
        assert llm["usage"]["prompt_tokens"] == 12
    assert run.status == RunStatus.CANCELLED and run.completion_tokens == llm["usage"]["completion_tokens"]
