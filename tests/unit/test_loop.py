"""The tool loop on its own: no database, a list-collecting trace, counting fakes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from nrllm_agents.domain import (
    DENIED_RESULT,
    LoopOutcome,
    LoopState,
    ProviderError,
    RunCancellationRequested,
    Step,
    StepKind,
    ToolError,
    ToolLoop,
)
from nrllm_agents.domain.providers import ScriptedProvider
from nrllm_agents.domain.replay import rebuild_state
from nrllm_agents.domain.tools import Calculator


class CountingTool:
    """A fixture tool that counts executions and can be told to fail."""

    def __init__(self, name: str, *, requires_approval: bool = False, fail: Exception | None = None) -> None:
        self.name = name
        self.description = f"test tool {name}"
        self.parameters = {"type": "object", "properties": {}}
        self.requires_approval = requires_approval
        self.fail = fail
        self.calls: list[dict[str, Any]] = []

    def execute(self, arguments: dict[str, Any]) -> Any:
        self.calls.append(arguments)
        if self.fail is not None:
            raise self.fail
        return {"ok": self.name}


class SwallowingTool(CountingTool):
    """Catches ``Exception`` around work that raises a cancellation or a suspension."""

    def __init__(self, name: str, to_raise: BaseException) -> None:
        super().__init__(name)
        self.to_raise = to_raise

    def execute(self, arguments: dict[str, Any]) -> Any:
        self.calls.append(arguments)
        try:
            raise self.to_raise
        except Exception:  # the point of the test: this must not catch it
            return "swallowed"


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


class Recorder:
    """A trace that records steps and can raise at the n-th step."""

    def __init__(self, stop_at: int | None = None) -> None:
        self.steps: list[Step] = []
        self.stop_at = stop_at

    def __call__(self, step: Step) -> None:
        self.steps.append(step)
        if self.stop_at is not None and len(self.steps) - 1 == self.stop_at:
            raise RunCancellationRequested(boundary_sequence=self.stop_at)

    @property
    def kinds(self) -> list[str]:
        return [s.kind.value for s in self.steps]


def make_loop(
    script: list[dict[str, Any]], tools: list[Any], trace: Recorder, **kw: Any
) -> tuple[ToolLoop, ScriptedProvider]:
    provider = ScriptedProvider(script)
    return ToolLoop(provider, {t.name: t for t in tools}, trace=trace, **kw), provider


def test_completes_with_answer_and_records_every_step():
    a = CountingTool("a")
    trace = Recorder()
    loop, provider = make_loop(
        [
            {"tool_calls": [call("a", x=1)], "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
            {"content": "done", "usage": {"prompt_tokens": 5, "completion_tokens": 1}},
        ],
        [a],
        trace,
    )
    result = loop.start("go")
    assert result.outcome == LoopOutcome.COMPLETED
    assert result.final_text == "done"
    assert trace.kinds == ["request", "llm", "tool", "request", "llm"]
    assert [s.round for s in trace.steps] == [1, 1, 1, 2, 2]
    assert a.calls == [{"x": 1}] and provider.calls == 2
    assert result.usage.prompt_tokens == 8 and result.usage.completion_tokens == 3
    assert result.iterations == 2
    # The first request records the prompt; later requests only what no step recorded yet.
    assert trace.steps[0].payload["messages"] == [{"role": "user", "content": "go"}]
    assert trace.steps[3].payload["messages"] == []


@pytest.mark.parametrize(
    "stop_at, model_calls, a_calls, b_calls",
    [
        (0, 0, 0, 0),  # stopped at the request boundary: the model is never called
        (1, 1, 0, 0),  # after the model's answer: no tool of the turn starts
        (2, 1, 1, 0),  # after the first tool: the second tool of the same turn never starts
        (3, 1, 1, 1),  # after the last tool: no next round
    ],
)
def test_cancellation_stops_exactly_at_the_boundary(stop_at, model_calls, a_calls, b_calls):
    a, b = CountingTool("a"), CountingTool("b")
    trace = Recorder(stop_at=stop_at)
    loop, provider = make_loop([{"tool_calls": [call("a"), call("b")]}, {"content": "never"}], [a, b], trace)
    with pytest.raises(RunCancellationRequested) as info:
        loop.start("go")
    assert info.value.boundary_sequence == stop_at
    assert len(trace.steps) == stop_at + 1  # the step in flight was recorded, nothing after it
    assert (provider.calls, len(a.calls), len(b.calls)) == (model_calls, a_calls, b_calls)


def test_control_flow_exceptions_are_not_exceptions():
    assert not issubclass(RunCancellationRequested, Exception)


def test_a_tool_catching_exception_cannot_swallow_a_cancellation():
    tool = SwallowingTool("greedy", RunCancellationRequested())
    after = CountingTool("after")
    trace = Recorder()
    loop, provider = make_loop(
        [{"tool_calls": [call("greedy"), call("after")]}, {"content": "never"}], [tool, after], trace
    )
    with pytest.raises(RunCancellationRequested):
        loop.start("go")
    assert len(tool.calls) == 1 and after.calls == [] and provider.calls == 1


def test_a_tool_catching_exception_cannot_swallow_a_suspension():
    """Gated turns are checked before any of their calls runs, greedy tools included."""
    greedy = SwallowingTool("greedy", RunCancellationRequested())
    gated = CountingTool("gated", requires_approval=True)
    trace = Recorder()
    loop, _ = make_loop([{"tool_calls": [call("greedy"), call("gated")]}, {"content": "ok"}], [greedy, gated], trace)
    result = loop.start("go")
    assert result.outcome == LoopOutcome.AWAITING_APPROVAL
    assert greedy.calls == [] and gated.calls == []
    assert [c.name for c in result.state.pending_calls] == ["greedy", "gated"]


def test_approval_resume_runs_the_whole_turn_in_order_then_continues():
    plain, gated = CountingTool("plain"), CountingTool("gated", requires_approval=True)
    trace = Recorder()
    script = [{"tool_calls": [call("plain", n=1), call("gated", n=2)]}, {"content": "finished"}]
    loop, _ = make_loop(script, [plain, gated], trace)
    suspended = loop.start("go")
    # The state survives a JSON round trip (it is stored on the row between segments).
    state = LoopState.from_dict(json.loads(json.dumps(suspended.state.as_dict())))
    trace2 = Recorder()
    loop2, provider2 = make_loop(script, [plain, gated], trace2)
    result = loop2.resume(state, approved=True, decision={"by": "alice"})
    assert result.outcome == LoopOutcome.COMPLETED and result.final_text == "finished"
    assert trace2.kinds == ["approval", "tool", "tool", "request", "llm"]
    assert trace2.steps[0].payload["approved"] is True and trace2.steps[0].payload["by"] == "alice"
    assert plain.calls == [{"n": 1}] and gated.calls == [{"n": 2}] and provider2.calls == 1
    assert result.iterations == 2


def test_denial_is_fed_back_and_the_loop_continues():
    gated = CountingTool("gated", requires_approval=True)
    trace = Recorder()
    script = [{"tool_calls": [call("gated")]}, {"content": "understood, skipped"}]
    loop, _ = make_loop(script, [gated], trace)
    state = loop.start("go").state
    result = loop.resume(state, approved=False)
    assert result.outcome == LoopOutcome.COMPLETED and gated.calls == []
    denial = [m for m in result.state.messages if m["role"] == "tool"]
    assert denial and denial[0]["content"] == f"error: {DENIED_RESULT}"
    # The denial is in the audit stream as the call's tool step: the stream alone rebuilds the transcript.
    assert trace.kinds[-4:] == ["approval", "tool", "request", "llm"]
    assert trace.steps[-3].payload["error"] == DENIED_RESULT and trace.steps[-3].payload["result"] is None


def test_denial_can_end_the_run():
    gated = CountingTool("gated", requires_approval=True)
    loop, provider = make_loop([{"tool_calls": [call("gated")]}, {"content": "x"}], [gated], Recorder(), on_deny="stop")
    result = loop.resume(loop.start("go").state, approved=False)
    assert result.outcome == LoopOutcome.APPROVAL_DENIED and provider.calls == 1


def test_iteration_cap():
    a = CountingTool("a")
    loop, provider = make_loop([{"tool_calls": [call("a")]}] * 5, [a], Recorder(), max_iterations=3)
    result = loop.start("go")
    assert result.outcome == LoopOutcome.MAX_ITERATIONS
    assert provider.calls == 3 and len(a.calls) == 3


def test_provider_failure_ends_the_run():
    class Broken:
        name, model = "broken", "m"

        def complete(self, messages, tools):
            raise ProviderError("upstream 503", retryable=True, status_code=503)

    trace = Recorder()
    result = ToolLoop(Broken(), {}, trace=trace).start("go")
    assert result.outcome == LoopOutcome.PROVIDER_FAILED
    assert isinstance(result.error, ProviderError) and trace.kinds == ["request", "llm"]
    failed = trace.steps[-1].payload  # the failure is a step of the stream, saying why
    assert failed["failed"] is True and failed["error"] == "ProviderError: upstream 503"
    assert failed["usage"]["total_tokens"] == 0 and result.state.iterations == 0
    rebuilt = rebuild_state([{"kind": s.kind.value, "round": s.round, "payload": s.payload} for s in trace.steps])
    assert rebuilt.iterations == 0 and [m["role"] for m in rebuilt.messages] == ["user"]  # no turn


def test_a_key_in_a_provider_error_is_scrubbed_before_the_cut():
    key = "sk-ant-api03-" + "k" * 40

    class Leaky:
        name, model = "leaky", "m"

        def complete(self, messages, tools):
            raise RuntimeError("x" * 480 + f" key={key}")

    trace = Recorder()
    ToolLoop(Leaky(), {}, trace=trace).start("go")
    error = trace.steps[-1].payload["error"]
    assert "sk-ant" not in error and "kkkk" not in error and error.startswith("RuntimeError: xxx")


def test_tool_error_is_fed_back_unknown_tool_too():
    picky = CountingTool("picky", fail=ToolError("bad input"))
    trace = Recorder()
    loop, _ = make_loop([{"tool_calls": [call("picky"), call("nope")]}, {"content": "ok"}], [picky], trace)
    result = loop.start("go")
    assert result.outcome == LoopOutcome.COMPLETED
    tools = [s.payload for s in trace.steps if s.kind == StepKind.TOOL]
    assert tools[0]["error"] == "bad input" and tools[1]["error"] == "unknown tool 'nope'"


def test_unexpected_tool_crash_is_recorded_then_fails_the_run():
    crash = CountingTool("crash", fail=RuntimeError("boom"))
    after = CountingTool("after")
    trace = Recorder()
    loop, _ = make_loop([{"tool_calls": [call("crash"), call("after")]}], [crash, after], trace)
    result = loop.start("go")
    assert result.outcome == LoopOutcome.TOOL_FAILED and after.calls == []
    assert trace.steps[-1].kind == StepKind.TOOL and "RuntimeError: boom" in trace.steps[-1].payload["error"]


def test_calculator_in_a_loop():
    trace = Recorder()
    loop, _ = make_loop(
        [{"tool_calls": [call("calculator", expression="(17 + 25) * 3")]}, {"content": "126"}], [Calculator()], trace
    )
    loop.start("go")
    assert trace.steps[2].payload["result"] == {"expression": "(17 + 25) * 3", "value": 126}


def test_a_rebuilt_stream_continues_exactly_where_it_stopped():
    """The stream is the checkpoint: rebuild it at each cut and continue; the result matches."""
    from nrllm_agents.domain import rebuild_state

    script = [
        {"tool_calls": [call("a", n=1), call("b", n=2)]},
        {"tool_calls": [call("a", n=3)]},
        {"content": "finished"},
    ]
    full = Recorder()
    make_loop(script, [CountingTool("a"), CountingTool("b")], full)[0].start("go")
    as_dicts = [{"kind": s.kind.value, "round": s.round, "payload": s.payload} for s in full.steps]
    for cut in range(1, len(as_dicts)):
        a, b = CountingTool("a"), CountingTool("b")
        rest = Recorder()
        loop, provider = make_loop(script, [a, b], rest)
        result = loop.proceed(rebuild_state(as_dicts[:cut]))
        assert result.outcome == LoopOutcome.COMPLETED and result.final_text == "finished"
        done_before = [d["payload"]["call_id"] for d in as_dicts[:cut] if d["kind"] == "tool"]
        ran_now = [s.payload["call_id"] for s in rest.steps if s.kind == StepKind.TOOL]
        assert sorted(done_before + ran_now) == ["call_1_1", "call_1_2", "call_2_1"]  # each exactly once


def test_a_rebuilt_denial_with_stop_ends_the_run_without_asking_again():
    from nrllm_agents.domain import rebuild_state

    gated = CountingTool("gated", requires_approval=True)
    trace = Recorder()
    loop, _ = make_loop([{"tool_calls": [call("gated")]}, {"content": "x"}], [gated], trace, on_deny="stop")
    loop.resume(loop.start("go").state, approved=False)
    steps = [{"kind": s.kind.value, "round": s.round, "payload": s.payload} for s in trace.steps]
    again, provider = make_loop(
        [{"tool_calls": [call("gated")]}, {"content": "x"}], [gated], Recorder(), on_deny="stop"
    )
    result = again.proceed(rebuild_state(steps))
    assert result.outcome == LoopOutcome.APPROVAL_DENIED and provider.calls == 0 and gated.calls == []
