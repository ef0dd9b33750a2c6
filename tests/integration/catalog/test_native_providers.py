"""Runs on the anthropic and gemini providers through ``AgentRuntime``, against the loopback
servers and the real SDKs, configured only by each SDK's own variables; and a model server or
key that is missing, for every HTTP provider, recorded as a failed model step saying what to set.
"""

from __future__ import annotations

from typing import Any

import pytest

from nrllm_agents.conf import app_settings
from nrllm_agents.models import AgentRun, AgentRunEvent, RunStatus
from tests.integration.providers.test_native_providers import ENV, KINDS, server_class

pytestmark = pytest.mark.django_db

CALCULATOR_RUN = [
    {
        "tool_calls": [{"name": "calculator", "arguments": {"expression": "(17 + 25) * 3"}}],
        "usage": {"prompt_tokens": 40, "completion_tokens": 12},
    },
    {"content": "(17 + 25) * 3 is 126.", "usage": {"prompt_tokens": 70, "completion_tokens": 9}},
]


@pytest.fixture(autouse=True)
def _no_ambient_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for names in (*ENV.values(), ("OPENAI_API_KEY", "OPENAI_BASE_URL"), ("GOOGLE_API_KEY", "ANTHROPIC_AUTH_TOKEN")):
        for name in names:
            monkeypatch.delenv(name, raising=False)


def steps(run_id: Any) -> list[tuple[str, dict[str, Any]]]:
    return list(AgentRunEvent.objects.filter(run_id=run_id).order_by("sequence").values_list("kind", "payload"))


@pytest.mark.parametrize("kind", KINDS)
def test_a_calculator_run_end_to_end(kind: str, runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    key_variable, url_variable = ENV[kind]
    deltas: list[str] = []
    with server_class(kind)(CALCULATOR_RUN, api_key="key-from-the-environment", by_turn=True) as server:
        monkeypatch.setenv(key_variable, "key-from-the-environment")
        monkeypatch.setenv(url_variable, server.base_url)
        result = runtime.run(
            {"prompt": "What is (17 + 25) * 3?", "provider": kind, "tools": ["calculator"]},
            on_delta=lambda d: deltas.append(d["text"]),
        )
    assert result.status == RunStatus.COMPLETED, result.error
    assert result.final_text == "(17 + 25) * 3 is 126."
    recorded = steps(result.run_id)
    assert [k for k, _ in recorded] == ["request", "llm", "tool", "request", "llm"]
    default_model = {"anthropic": app_settings.ANTHROPIC_MODEL, "gemini": app_settings.GEMINI_MODEL}[kind]
    assert recorded[0][1]["provider"] == kind and recorded[0][1]["model"] == default_model
    assert recorded[2][1]["result"] == {"expression": "(17 + 25) * 3", "value": 126}
    assert recorded[4][1]["usage"] == {"prompt_tokens": 70, "completion_tokens": 9, "total_tokens": 79}
    assert "".join(deltas) == "(17 + 25) * 3 is 126."  # the answer streamed, piece by piece
    assert len(deltas) > 1
    run = AgentRun.objects.get(pk=result.run_id)
    assert (run.prompt_tokens, run.completion_tokens, run.iterations) == (110, 21, 2)
    assert run.model == default_model  # the run records the model it ran with
    assert len(server.requests) == 2  # the second carried the tool's result in the vendor's format


MISSING = {
    "openai": ("OPENAI_BASE_URL", {"OPENAI_API_KEY": "sk-test-not-leaked-0000"}),
    "anthropic": ("ANTHROPIC_BASE_URL", {"ANTHROPIC_API_KEY": "sk-ant-not-leaked-0000"}),
    "gemini": ("GOOGLE_GEMINI_BASE_URL", {"GEMINI_API_KEY": "AIzaNotLeaked0000000"}),
}


@pytest.mark.parametrize("kind", sorted(MISSING))
def test_no_model_server_is_a_failed_model_step_naming_the_variable(
    kind: str, runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    url_variable, keys = MISSING[kind]
    with server_class(kind)() as gone:
        base_url = gone.base_url
    monkeypatch.setenv(url_variable, base_url)  # nobody listens there any more
    for name, value in keys.items():
        monkeypatch.setenv(name, value)
    result = runtime.run({"prompt": "hi", "provider": kind, "model": "m", "tools": []})
    assert (result.status, result.termination_reason) == (RunStatus.FAILED, "provider_failed")
    [(request, _), (llm, failed)] = steps(result.run_id)
    assert (request, llm) == ("request", "llm") and failed["failed"] is True
    assert "APIConnectionError" in failed["error"] or "ConnectError" in failed["error"]
    assert url_variable in failed["error"] and url_variable in result.error
    assert all(value not in failed["error"] for value in keys.values())


@pytest.mark.parametrize(
    ("kind", "variable"),
    [("anthropic", "ANTHROPIC_API_KEY"), ("gemini", "GEMINI_API_KEY"), ("openai", "OPENAI_API_KEY")],
)
def test_no_key_is_a_failed_model_step_naming_the_variable(
    kind: str, variable: str, runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A server that wants a key the run does not have (openai sends its keyless placeholder).
    with server_class(kind)(api_key="the-real-key-0000") as server:
        monkeypatch.setenv(MISSING[kind][0], server.base_url)
        result = runtime.run({"prompt": "hi", "provider": kind, "model": "m", "tools": []})
    assert (result.status, result.termination_reason) == (RunStatus.FAILED, "provider_failed")
    [_, (kind_of_step, failed)] = steps(result.run_id)
    assert kind_of_step == "llm" and failed["failed"] is True and variable in failed["error"]
