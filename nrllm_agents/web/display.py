"""What the run page shows around a step; the step's words come from ``describe``.

The browser stream sends the same ``details`` with each live step (``web/stream.py``), so a
step reads the same whether the server rendered the page or the stream added it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

from ..presentation import describe


def time_of(iso: str | None) -> str:
    """``HH:MM:SS`` of a stored ISO timestamp (UTC), or an empty string."""
    return iso[11:19] if iso and len(iso) >= 19 else ""


def elapsed(started_at: datetime | None, finished_at: datetime | None) -> str:
    """``12.3 s`` from start to finish (or to now while the run goes on); ``—`` before it starts."""
    if started_at is None:
        return "—"
    seconds = ((finished_at or timezone.now()) - started_at).total_seconds()
    return f"{max(seconds, 0):.1f} s"


def duration(ms: float | None) -> str:
    """``830 ms`` under a second, ``2.41 s`` under a minute, ``3.2 min`` beyond; ``""`` for none."""
    if ms is None:
        return ""
    if ms < 1000:
        return f"{ms:.0f} ms" if ms >= 1 or ms == 0 else f"{ms:.2f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.2f} s"
    return f"{ms / 60_000:.1f} min"


def for_page(step: dict[str, Any], *, final_sequence: int | None = None) -> dict[str, Any]:
    """A ``presenters.step_dict`` with what the template shows; ``final_sequence`` names the
    step holding the final answer (shown once, in the outcome, not again on its card)."""
    payload = step.get("payload") or {}
    return {
        **step,
        "details": describe.lines(step["kind"], payload),
        "time": time_of(step.get("created_at")),
        "duration": duration(step.get("duration_ms")),
        "interrupted": bool(payload.get("interrupted")) if isinstance(payload, dict) else False,
        # a step a cancel cut short carries an error text, but it is a decision, not a failure
        "failed": isinstance(payload, dict) and payload.get("error") is not None and not payload.get("interrupted"),
        "final": step.get("sequence") == final_sequence,
    }


def final_answer_sequence(steps: list[dict[str, Any]], final_text: str | None) -> int | None:
    """The sequence of the ``llm`` step whose content is the run's final answer, if any."""
    if not final_text:
        return None
    for step in reversed(steps):
        if step["kind"] == "llm":
            payload = step.get("payload") or {}
            return step["sequence"] if payload.get("content") == final_text else None
    return None
