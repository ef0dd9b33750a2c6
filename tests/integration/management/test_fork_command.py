"""``agent_run`` limit flags and ``agent_fork`` (exit codes, output, the parent left unchanged)."""

from __future__ import annotations

import json

import pytest

from nrllm_agents.models import AgentRun, CancelSource

from .test_commands import run, snapshot

pytestmark = pytest.mark.django_db

TWO_CALLS = {
    "tool_calls": [
        {"name": "calculator", "arguments": {"expression": "1+1"}},
        {"name": "calculator", "arguments": {"expression": "2+2"}},
    ],
    "usage": {"prompt_tokens": 60, "completion_tokens": 10},
}


def test_agent_run_budget_flag_cancels_with_exit_3_naming_the_limit():
    ran = run(
        "agent_run",
        "p",
        "--tool",
        "calculator",
        "--max-total-tokens",
        "50",
        "--json",
        "--script",
        json.dumps([TWO_CALLS, {"content": "4"}]),
    )
    assert ran.code == 3
    last = ran.lines[-1]
    assert last["termination_reason"] == "budget_exceeded" and last["cancel"]["limit"]["measured"] == 70
    assert [line["step"]["kind"] for line in ran.lines[1:-1]] == ["request", "llm", "cancelled"]


@pytest.mark.parametrize("flag", ["--deadline-seconds", "--max-total-tokens"])
def test_agent_run_bad_limit_is_a_usage_error_naming_the_flag(flag):
    ran = run("agent_run", "p", flag, "0")
    assert ran.code == 2 and flag in ran.err and not AgentRun.objects.exists()


def cancelled_parent(runtime):
    def observe(step):
        if step["kind"] == "llm":
            runtime.cancel(step["run_id"], source=CancelSource.CLI)

    return runtime.run(
        {"prompt": "add", "tools": ["calculator"], "script": [TWO_CALLS, {"content": "4"}]}, on_step=observe
    ).run_id


def test_agent_fork_continues_a_cancelled_run_and_leaves_it_unchanged(runtime):
    parent = cancelled_parent(runtime)
    before = snapshot()
    ran = run("agent_fork", str(parent))
    assert ran.code == 0, ran.err
    assert f"(a fork of {parent})" in ran.out and "forked" in ran.out and "2 unanswered calls answered" in ran.out
    fork = AgentRun.objects.get(parent_id=parent)
    assert fork.final_text == "4" and fork.forked_from_sequence == 1
    runs, events, notes = snapshot()
    assert [r for r in runs if r["id"] == parent] == [r for r in before[0] if r["id"] == parent]
    assert [e for e in events if e[0] == parent] == [e for e in before[1] if e[0] == parent]


@pytest.mark.parametrize(
    "args, code, text",
    [
        (["--from", "7"], 2, "--from: no step 7"),
        (["--from", "-1"], 2, "--from"),
        (["--max-total-tokens", "0"], 2, "--max-total-tokens"),
    ],
)
def test_agent_fork_usage_errors(runtime, args, code, text):
    parent = cancelled_parent(runtime)
    ran = run("agent_fork", str(parent), *args)
    assert ran.code == code and text in ran.err
    assert not AgentRun.objects.filter(parent_id=parent).exists()


def test_agent_fork_unknown_or_malformed_run(runtime):
    assert run("agent_fork", "00000000-0000-0000-0000-000000000000").code == 1
    assert run("agent_fork", "nope").code == 2
