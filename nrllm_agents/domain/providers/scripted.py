"""An offline, deterministic provider that plays a script of turns.

A script is a list of turns, each ``{"content": "final answer"}`` or ``{"tool_calls": [...]}``,
with optional ``"delay"`` (simulated model latency), ``"usage"`` and ``"expect"`` (the transcript
the turn must receive; any other fails the call with a ``ProviderError`` saying where it
differs). The turn played is chosen by how many model calls the run itself already made
(``CallContext.call_index``), so a run resumed in another process continues where it was, and a
fork plays its own script from its first turn; without a context it counts the transcript's
assistant messages.

The delay is spent like a real model streams: a content answer is emitted in pieces spread over
it (``CallContext.delta``), and a cancel cuts it short at once, keeping what was "generated" so
far with an estimated usage. The script format for users: docs/howto/runs.md.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..cancel import CallContext, StepInterrupted
from ..errors import ConfigurationError, ProviderError
from ..steps import ModelResponse, ToolCall, Usage

DEMO_SCRIPT: list[dict[str, Any]] = [
    {
        "delay": 0.8,
        "usage": {"prompt_tokens": 42, "completion_tokens": 18},
        "tool_calls": [{"name": "calculator", "arguments": {"expression": "(17 + 25) * 3"}}],
    },
    {
        "delay": 0.8,
        "usage": {"prompt_tokens": 71, "completion_tokens": 12},
        "tool_calls": [{"name": "current_time", "arguments": {}}],
    },
    {
        "delay": 0.8,
        "usage": {"prompt_tokens": 95, "completion_tokens": 15},
        "tool_calls": [{"name": "sleep", "arguments": {"seconds": 2}}],
    },
    {
        "delay": 0.8,
        "usage": {"prompt_tokens": 118, "completion_tokens": 15},
        "tool_calls": [{"name": "sleep", "arguments": {"seconds": 2}}],
    },
    {
        "delay": 0.8,
        "usage": {"prompt_tokens": 140, "completion_tokens": 30},
        "content": "(17 + 25) * 3 is 126. I checked the clock and waited a little, as asked.",
    },
]
DEMO_TOOLS = ("calculator", "current_time", "sleep")
_DEMO_WORDS = {
    "calculator": "(17 + 25) * 3 is 126.",
    "current_time": "I checked the clock.",
    "sleep": "I waited a little.",
}


def demo_script(offered: Sequence[str]) -> list[dict[str, Any]]:
    """The demo, calling only the tools ``offered`` (and saying which it needed but was not given)."""
    turns = [t for t in DEMO_SCRIPT[:-1] if t["tool_calls"][0]["name"] in offered]
    used = [name for name in DEMO_TOOLS if name in offered]
    missing = [name for name in DEMO_TOOLS if name not in offered]
    words = " ".join(_DEMO_WORDS[name] for name in used)
    if missing:
        words = (
            words + " " if words else ""
        ) + f"(The demo would also use {', '.join(missing)}: offer it with --tool.)"
    return [*turns, {**DEMO_SCRIPT[-1], "content": words}]


MAX_DELAY_SECONDS = 60.0
MAX_USAGE_TOKENS = 1_000_000  # per turn: a run's total must fit the database's integer columns
STREAM_PIECES = 24  # a content answer with a delay streams in up to this many pieces


def validate_script(script: Any) -> list[dict[str, Any]]:
    """Return the script as a list of turns, or raise ``ConfigurationError`` saying what is wrong."""
    if isinstance(script, str):
        try:
            script = json.loads(script)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"script is not valid JSON: {exc.msg} at char {exc.pos}") from None
    if not isinstance(script, list) or not script:
        raise ConfigurationError("script must be a non-empty JSON list of turns")
    for i, turn in enumerate(script):
        where = f"script turn {i}"
        if not isinstance(turn, dict):
            raise ConfigurationError(f"{where} must be an object")
        unknown = set(turn) - {"content", "tool_calls", "delay", "usage", "expect"}
        if unknown:
            raise ConfigurationError(f"{where} has unknown keys: {', '.join(sorted(unknown))}")
        if ("content" in turn) == ("tool_calls" in turn):
            raise ConfigurationError(f"{where} needs exactly one of 'content' or 'tool_calls'")
        if "content" in turn and not isinstance(turn["content"], str):
            raise ConfigurationError(f"{where}: content must be a string")
        if "tool_calls" in turn:
            calls = turn["tool_calls"]
            if not isinstance(calls, list) or not calls:
                raise ConfigurationError(f"{where}: tool_calls must be a non-empty list")
            for call in calls:
                if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                    raise ConfigurationError(f"{where}: each tool call needs a string 'name'")
                if not isinstance(call.get("arguments", {}), dict):
                    raise ConfigurationError(f"{where}: tool call arguments must be an object")
        delay = turn.get("delay", 0)
        if isinstance(delay, bool) or not isinstance(delay, (int, float)) or not 0 <= delay <= MAX_DELAY_SECONDS:
            raise ConfigurationError(f"{where}: delay must be a number of seconds in [0, {MAX_DELAY_SECONDS:g}]")
        usage = turn.get("usage", {})
        if not isinstance(usage, dict) or any(
            k not in ("prompt_tokens", "completion_tokens")
            or isinstance(v, bool)
            or not isinstance(v, int)
            or not 0 <= v <= MAX_USAGE_TOKENS
            for k, v in usage.items()
        ):
            raise ConfigurationError(
                f"{where}: usage takes integer prompt_tokens/completion_tokens from 0 to {MAX_USAGE_TOKENS}"
            )
        expect = turn.get("expect", [])
        if not isinstance(expect, list) or not all(isinstance(m, dict) for m in expect):
            raise ConfigurationError(f"{where}: expect must be a list of message objects")
    return script


def transcript_mismatch(expect: list[dict[str, Any]], messages: Sequence[dict[str, Any]]) -> str | None:
    """Where ``messages`` differs from ``expect`` (one object of required keys per message), or ``None``."""
    if len(messages) != len(expect):
        return f"expected {len(expect)} messages, got {len(messages)}"
    for i, (want, got) in enumerate(zip(expect, messages)):
        wrong = {k: got.get(k) for k, v in want.items() if got.get(k) != v}
        if wrong:
            return f"message {i}: expected {json.dumps(want)[:300]}, got {json.dumps(wrong, default=str)[:300]}"
    return None


class ScriptedProvider:
    """Plays a validated script; ``calls`` counts the model calls this instance served."""

    name = "scripted"

    def __init__(self, script: Any = None, *, model: str = "scripted-demo") -> None:
        self.script = validate_script(DEMO_SCRIPT if script is None else script)
        self.demo = script is None  # the demo fits its calls to the tools the run offers
        self.model = model or "scripted-demo"
        self.calls = 0
        # No turn waits: every call returns at once (see ``Provider.instant``).
        self.instant = not any(turn.get("delay") for turn in self.script)

    def complete(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]], context: CallContext | None = None
    ) -> ModelResponse:
        context = context or CallContext()
        self.calls += 1
        # The run's own turn: a fork or a thread starts from a transcript holding earlier turns.
        position = sum(1 for m in messages if m.get("role") == "assistant")  # keeps call ids unique
        index = position if context.call_index is None else context.call_index
        if index >= len(self.script):
            raise ProviderError(f"script exhausted after {len(self.script)} turns")
        script = self.script
        if self.demo:
            script = demo_script([str((t.get("function") or {}).get("name")) for t in tools])
            if index >= len(script):
                raise ProviderError(f"script exhausted after {len(script)} turns")
        turn = script[index]
        if "expect" in turn:
            mismatch = transcript_mismatch(turn["expect"], messages)
            if mismatch is not None:
                raise ProviderError(f"script turn {index}: the transcript does not match expect: {mismatch}")
        usage = Usage.from_dict(turn.get("usage"))
        delay = float(turn.get("delay") or 0)
        if "content" in turn:
            self._stream(turn["content"], delay, usage, context)
            return ModelResponse(content=turn["content"], usage=usage, finish_reason="stop")
        if delay and context.token.wait(delay):
            raise StepInterrupted(
                partial=ModelResponse(content=None, usage=Usage(usage.prompt_tokens, 0)), usage_estimated=True
            )
        calls = tuple(
            ToolCall(
                id=str(c.get("id") or f"call_{position + 1}_{i + 1}"),
                name=c["name"],
                arguments=dict(c.get("arguments") or {}),
            )
            for i, c in enumerate(turn["tool_calls"])
        )
        return ModelResponse(content=None, tool_calls=calls, usage=usage, finish_reason="tool_calls")

    @staticmethod
    def _stream(content: str, delay: float, usage: Usage, context: CallContext) -> None:
        """Spend ``delay`` emitting ``content`` in pieces; a cancel stops it with the text so far."""
        if not delay:
            context.delta(content)
            return
        pieces = _pieces(content, STREAM_PIECES)
        pause = delay / max(len(pieces), 1)
        sent = ""
        for piece in pieces or [""]:
            if context.token.wait(pause):
                done = len(sent) / len(content) if content else 0.0
                estimate = Usage(usage.prompt_tokens, round(usage.completion_tokens * done))
                raise StepInterrupted(partial=ModelResponse(content=sent, usage=estimate), usage_estimated=True)
            context.delta(piece)
            sent += piece


def _pieces(text: str, most: int) -> list[str]:
    """``text`` cut into at most ``most`` pieces on word boundaries, joined back exactly."""
    words = text.split(" ")
    per = max(1, -(-len(words) // most))
    groups = [" ".join(words[i : i + per]) for i in range(0, len(words), per)]
    return [g + (" " if i < len(groups) - 1 else "") for i, g in enumerate(groups)]
