"""What the protocol tests share: messages, scripts, and waiting on the test database."""

from __future__ import annotations

from typing import Any

ANSWER = "The answer comes in pieces, one word after another, as a model writes it."


def said(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def answer(content: str = ANSWER, delay: float = 0.6) -> list[dict[str, Any]]:
    return [{"content": content, "delay": delay}]


PIECE_SECONDS = 1.0  # the scripted provider writes a long answer in 24 pieces: one a second here


def slow(words: int = 400, delay: float = 55.0) -> list[dict[str, Any]]:
    """A model call that writes for ``delay`` seconds: only a cancel ends it early. (24 s once ran
    out before a loaded CI's flow reached its cancel: the run completed and the cancel was a 409.)"""
    return [{"content": "word " * words, "delay": delay}]


NOTE = [
    {"tool_calls": [{"name": "write_note", "arguments": {"title": "plan", "body": "ship it"}}]},
    {"content": "Noted."},
]


def writing(run_id: str) -> bool:
    """Whether the run's model call is in flight and has written something (a delta sent)."""
    from nrllm_agents.models import AgentRun

    run = AgentRun.objects.filter(pk=run_id).first()
    return bool(run and run.status == "running" and run.events.filter(kind="request").exists())
