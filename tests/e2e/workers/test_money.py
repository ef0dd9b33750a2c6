"""Connections, prices and agents with real ``rqworker`` processes.

The worker decrypts the connection's key itself (with the key setting it inherits), calls the
shipped chat-completions server, which records the ``Authorization`` header, costs each call at
the price in force, and runs an agent's run with the version it was queued with.
``transaction=True``: the workers are other processes on the test database.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from nrllm_agents.catalog import agents, connections
from nrllm_agents.models import AgentRun, RunStatus
from nrllm_agents.money import pricing
from nrllm_agents.testing.chat_server import ChatCompletionServer
from tests.e2e.processes import wait_for
from tests.e2e.workers.test_rqworker import events, finished, start_workers  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

KEY = "sk-worker-3c9d1f7a2e5b8c0d4f6a1e3b"
CALC = {"name": "calculator", "arguments": {"expression": "2+2"}}


def test_a_worker_runs_through_a_connection_with_its_key_and_its_price_until_max_cost(
    runtime, queue, start_workers, worker_env
):
    script = [{"tool_calls": [CALC], "usage": {"prompt_tokens": 1000, "completion_tokens": 100}}] * 4
    with ChatCompletionServer([*script, {"content": "4"}], api_key=KEY, by_turn=True) as server:
        row, _ = connections.save("vendor", kind="openai", base_url=server.base_url, default_model="gpt-x", api_key=KEY)
        pricing.set_price(
            model="gpt-x", connection=row, input_per_million=Decimal(100), output_per_million=Decimal(1000)
        )
        start_workers(1)
        run_id = runtime.enqueue({"prompt": "add", "connection": "vendor", "tools": ["calculator"], "max_cost": "0.45"})
        wait_for(lambda: finished(run_id), what="the run to stop")
    run = AgentRun.objects.get(pk=run_id)
    # Each call: 1000 × 100 / 10⁶ + 100 × 1000 / 10⁶ = 0.2; the third crosses 0.45.
    assert (run.status, run.termination_reason, run.cost) == (RunStatus.CANCELLED, "cost_exceeded", Decimal("0.6"))
    assert [h["authorization"] for h in server.request_headers] == [f"Bearer {KEY}"] * 3
    assert [e.payload["usage"]["cost"] for e in events(run_id) if e.kind == "llm"] == ["0.2", "0.2", "0.2"]
    assert run.cancel_detail == {"limit": "max_cost", "value": "0.45", "measured": "0.6", "unit": "USD"}


def test_a_worker_runs_an_agents_run_with_the_version_it_was_queued_with(runtime, queue, start_workers):
    agents.save("adder", {"system": "v1", "tools": ["calculator"], "provider": "scripted"})
    run_id = runtime.enqueue({"prompt": "p", "agent": "adder", "script": [{"content": "done"}]})
    agents.save("adder", {"system": "v2", "tools": ["current_time"], "provider": "scripted"})  # before any worker
    start_workers(1)
    wait_for(lambda: finished(run_id), what="the run to finish")
    run = AgentRun.objects.get(pk=run_id)
    assert run.status == RunStatus.COMPLETED and run.agent_snapshot["version"] == 1
    request = events(run_id)[0].payload
    assert request["messages"][0] == {"role": "system", "content": "v1"} and request["tools"] == ["calculator"]
