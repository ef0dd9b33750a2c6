"""The transcript a fork starts from: its parent's steps up to N, with every call answered.

A model server accepts a conversation only when each tool call of an assistant turn is
answered by a tool message before the next turn. A run stopped mid-turn (cancelled,
interrupted, denied, failed) leaves calls without answers; a fork gives each of them an
explicit one instead of executing it. No Django here: plain step dicts in, messages out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .replay import rebuild_state

NOT_EXECUTED = "not executed: the run was {why} before this call"


def _why(call_id: str, answered_later: set[str], parent_status: str) -> str:
    if call_id in answered_later:
        return "forked"  # the parent ran it after the fork point; this transcript did not
    return {"cancelled": "cancelled", "failed": "stopped by a failure"}.get(parent_status, "forked")


def repair(
    messages: list[dict[str, Any]],
    *,
    answered_later: set[str] = frozenset(),  # type: ignore[assignment]
    parent_status: str = "cancelled",
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The messages with an answer added for every unanswered tool call, and those answers.

    Each answer goes right after the answers its turn already has, before the next
    non-tool message, in the order of the turn's calls.
    """
    out: list[dict[str, Any]] = []
    added: list[dict[str, Any]] = []
    open_calls: list[dict[str, Any]] = []

    def close() -> None:
        answered = {m.get("tool_call_id") for m in out if m.get("role") == "tool"}
        for call in open_calls:
            if call["id"] not in answered:
                answer = {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "content": NOT_EXECUTED.format(why=_why(call["id"], answered_later, parent_status)),
                }
                out.append(answer)
                added.append({"call_id": call["id"], "name": call.get("name"), "content": answer["content"]})
        open_calls.clear()

    for message in messages:
        if message.get("role") != "tool":
            close()
        out.append(message)
        if message.get("role") == "assistant":
            open_calls.extend(message.get("tool_calls") or [])
    close()
    return out, added


def fork_payload(
    steps: Iterable[Mapping[str, Any]], *, from_sequence: int, parent_id: str, parent_status: str
) -> tuple[dict[str, Any], int]:
    """The ``forked`` step's payload and round for a fork of ``steps`` at ``from_sequence``.

    ``steps`` is the parent's whole stream (dicts with ``sequence``, ``kind``, ``round``,
    ``payload``); the transcript is rebuilt from those up to and including ``from_sequence``.
    """
    steps = list(steps)
    copied = [s for s in steps if s["sequence"] <= from_sequence]
    later = {
        str((s.get("payload") or {}).get("call_id"))
        for s in steps
        if s["sequence"] > from_sequence and s["kind"] == "tool"
    }
    state = rebuild_state(copied)
    messages, repaired = repair(state.messages, answered_later=later, parent_status=parent_status)
    payload = {
        "parent_id": parent_id,
        "from_sequence": from_sequence,
        "parent_status": parent_status,
        "copied_steps": len(copied),
        "messages": messages,
        "repaired": repaired,
    }
    return payload, state.round
