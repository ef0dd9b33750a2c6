"""The call journal's recording proxies (testing/call_journal.py): no database, no Django."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest

from nrllm_agents.domain import RunCancellationRequested
from nrllm_agents.domain.cancel import CallContext, CancelToken
from nrllm_agents.domain.loop import ToolLoop, accepts_context
from nrllm_agents.domain.providers import ScriptedProvider
from nrllm_agents.domain.providers.anthropic_messages import AnthropicProvider
from nrllm_agents.domain.providers.gemini import GeminiProvider
from nrllm_agents.domain.providers.openai_compat import OpenAIProvider
from nrllm_agents.domain.steps import LoopOutcome
from nrllm_agents.domain.tools import Calculator, CurrentTime, Sleep
from nrllm_agents.testing import call_journal
from nrllm_agents.testing.call_journal import CallJournal, recording_provider, recording_tool
from nrllm_agents.testing.tools import StubbornWait


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize(
    "cls", [ScriptedProvider, OpenAIProvider, AnthropicProvider, GeminiProvider, Calculator, CurrentTime, Sleep]
)
def test_no_product_class_takes_a_journal(cls: type) -> None:
    assert "journal" not in inspect.signature(cls).parameters


def test_enabled_by_the_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(call_journal.VARIABLE, raising=False)
    assert not call_journal.enabled()
    CallJournal(run_id="r").record("model", "m")  # no file named: nothing written, no error
    monkeypatch.setenv(call_journal.VARIABLE, str(tmp_path / "j.jsonl"))
    assert call_journal.enabled()
    CallJournal(run_id="r").record("tool", "t")
    assert [(e["what"], e["name"], e["run_id"]) for e in lines(tmp_path / "j.jsonl")] == [("tool", "t", "r")]


def test_a_proxy_takes_a_context_exactly_when_what_it_wraps_does(tmp_path: Path) -> None:
    record = CallJournal(str(tmp_path / "j.jsonl"))
    assert accepts_context(recording_tool(Sleep(), record).execute)
    assert not accepts_context(recording_tool(Calculator(), record).execute)
    assert not accepts_context(recording_tool(StubbornWait(), record).execute)
    assert accepts_context(recording_provider(ScriptedProvider(), record).complete)


def test_a_proxy_shows_what_it_wraps() -> None:
    record = CallJournal(path="")
    sleep = Sleep(max_seconds=3)
    tool = recording_tool(sleep, record)
    assert (tool.name, tool.description, tool.parameters, tool.requires_approval) == (
        sleep.name,
        sleep.description,
        sleep.parameters,
        sleep.requires_approval,
    )
    assert tool.idempotent is True and tool.max_seconds == 3
    provider = recording_provider(ScriptedProvider(model="m1"), record)
    assert (provider.name, provider.model, provider.calls) == ("scripted", "m1", 0)


def test_the_start_is_recorded_before_the_wrapped_call(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    seen: list[int] = []

    class Probe:
        name = "probe"
        description = "records how many starts the journal held when it ran"
        parameters: dict[str, Any] = {"type": "object"}
        requires_approval = False

        def execute(self, arguments: dict[str, Any], context: CallContext | None = None) -> Any:
            seen.append(len(lines(path)))
            return "ok"

    assert recording_tool(Probe(), CallJournal(str(path), run_id=7)).execute({}, context=CallContext()) == "ok"
    assert seen == [1] and lines(path)[0]["run_id"] == "7"


def test_a_run_through_proxies_journals_each_start_and_a_tripped_token_starts_nothing(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    record = CallJournal(str(path))
    script = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}]}, {"content": "2"}]
    tools = {"calculator": recording_tool(Calculator(), record)}
    result = ToolLoop(recording_provider(ScriptedProvider(script), record), tools, trace=lambda s: None).start("q")
    assert result.outcome == LoopOutcome.COMPLETED
    assert [(e["what"], e["name"]) for e in lines(path)] == [
        ("model", "scripted-demo"),
        ("tool", "calculator"),
        ("model", "scripted-demo"),
    ]
    path.unlink()
    token = CancelToken()
    token.cancel()
    loop = ToolLoop(recording_provider(ScriptedProvider(script), record), tools, trace=lambda s: None, token=token)
    with pytest.raises(RunCancellationRequested):
        loop.start("q")
    assert lines(path) == []
