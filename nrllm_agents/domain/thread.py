"""The transcript a thread's run leaves, and the first step of the run that continues it.

A thread's next run starts from the transcript of the latest run before it that took a turn
(not rolled back, and its model was called): rebuilt from that run's own stream, whose first
step already held everything before it. A run that took no turn (cancelled while queued, or
stopped before its first model call) is skipped, so the transcript before it goes on whole.
A run stopped mid-turn is repaired like a fork's parent (every tool call answered), and the
partial answer of a model call a cancel cut short stays as an assistant turn: the interrupted
turn. No Django here: plain step dicts in, messages out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .fork import repair
from .replay import rebuild_state


def transcript_after(steps: Iterable[Mapping[str, Any]], *, status: str) -> list[dict[str, Any]]:
    """The messages a run's stream (dicts with ``kind``, ``round``, ``payload``) leaves for
    the next run of its thread; ``status`` is the run's (``cancelled``: its unanswered calls
    say so). The partial content of a last, interrupted model call is kept as the turn's
    answer; its half-written tool calls are not (nothing can answer them)."""
    steps = list(steps)
    messages, _ = repair(rebuild_state(steps).messages, parent_status=status)
    last_llm = next((s for s in reversed(steps) if s["kind"] == "llm"), None)
    partial = (last_llm or {}).get("payload") or {}
    if partial.get("interrupted") and partial.get("content"):
        messages.append({"role": "assistant", "content": partial["content"]})
    return messages


def opening_payload(
    base: list[dict[str, Any]],
    *,
    prompt: str,
    system: str | None,
    thread_id: str,
    position: int,
    after_run: str | None,
) -> dict[str, Any]:
    """The ``thread`` step's payload: the thread's transcript (``base``, the messages of run
    ``after_run``), then the new message. A thread's system prompt is its first run's: a
    later run's ``system`` is used only when the transcript has none yet."""
    messages = list(base)
    if system and not any(m.get("role") == "system" for m in messages):
        messages.insert(0, {"role": "system", "content": system})
    messages.append({"role": "user", "content": prompt})
    return {
        "thread_id": thread_id,
        "position": position,
        "after_run": after_run,
        "copied_messages": len(base),
        "messages": messages,
    }
