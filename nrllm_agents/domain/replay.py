"""Rebuild a loop's state from its recorded steps: the step stream is the checkpoint.

A segment that died (or was stopped for a deploy, or failed transiently) is continued by
another process from what the stream says happened: the transcript, the counters, and the
calls of the last model turn that have no recorded result yet.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .loop import tool_content
from .steps import LoopState, ToolCall, Usage


def rebuild_state(steps: Iterable[Mapping[str, Any]]) -> LoopState:
    """The ``LoopState`` after the given steps (dicts with ``kind``, ``round``, ``payload``).

    ``pending_calls`` holds the calls of the last model turn without a recorded ``tool``
    step, in order: a continuation runs exactly those, never one that already ran;
    ``decision`` is the human decision recorded for that turn, if any (kept even when every
    call of the turn has its step, so a denial that ends the run still ends it). A model
    call interrupted by a cancel counts in the spend and the iterations but adds no turn; a
    tool call interrupted by a cancel is answered by its recorded interruption. A call in
    doubt that a person said did happen, with no step yet, is ``in_doubt`` with their result.
    """
    messages: list[dict[str, Any]] = []
    usage = Usage()
    iterations = 0
    round_ = 0
    turn: list[ToolCall] = []
    done: set[str] = set()
    decision: bool | None = None
    happened: dict[str, Any] | None = None  # a person said a call in doubt did happen, with its result
    for step in steps:
        kind, payload = step["kind"], step.get("payload") or {}
        round_ = max(round_, int(step.get("round") or 0))
        if kind in ("request", "forked", "thread"):  # a fork's or a thread run's first step holds its transcript
            messages.extend(payload.get("messages") or [])
        elif kind == "llm":
            if payload.get("failed"):
                continue  # the model server failed: no turn, no iteration (a retry asked again)
            iterations += 1
            usage = usage + Usage.from_dict(payload.get("usage"))
            if payload.get("interrupted"):
                continue  # cut short by a cancel: it spent, but it is not a turn of the transcript
            turn = [ToolCall.from_dict(c) for c in payload.get("tool_calls") or []]
            done, decision, happened = set(), None, None
            assistant: dict[str, Any] = {"role": "assistant", "content": payload.get("content")}
            if turn:
                assistant["tool_calls"] = [c.as_dict() for c in turn]
            messages.append(assistant)
        elif kind == "approval":
            decision = bool(payload.get("approved"))
            if payload.get("in_doubt") == "happened" and isinstance(payload.get("in_doubt_call"), dict):
                happened = {"call": payload["in_doubt_call"], "happened": True, "result": payload.get("result")}
        elif kind == "tool":
            done.add(str(payload.get("call_id")))
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": payload.get("call_id"),
                    "content": tool_content(payload.get("result"), payload.get("error")),
                }
            )
    pending = [c for c in turn if c.id not in done]
    if happened is not None and happened["call"].get("id") not in {c.id for c in pending}:
        happened = None  # its result is recorded already
    return LoopState(
        messages=messages,
        pending_calls=pending,
        round=round_,
        iterations=iterations,
        usage=usage,
        sent=len(messages),
        decision=decision,
        in_doubt=happened,
    )
