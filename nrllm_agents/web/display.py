"""What the run page shows around a step; the step's words come from ``describe``.

The browser stream sends the same ``details`` with each live step (``api/stream.py``), so a
step reads the same whether the server rendered the page or the stream added it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

from ..money import pricing
from ..presentation import describe


def absolute(moment: datetime | str | None) -> str:
    """The one way an instant reads on the server (``console.js`` writes the browser's the same
    way, in its own time zone): ``3 Dec 2026, 14:17:49 CET`` in ``TIME_ZONE``; ``""`` for none."""
    if isinstance(moment, str):
        try:
            moment = datetime.fromisoformat(moment)
        except ValueError:
            return ""
    if moment is None:
        return ""
    local = timezone.localtime(moment) if timezone.is_aware(moment) else moment
    return f"{local.day} {local:%b %Y, %H:%M:%S} {local.tzname() or ''}".rstrip()


def time_of(iso: str | None) -> str:
    """A stored ISO timestamp as ``absolute`` writes it, or an empty string."""
    return absolute(iso)


def elapsed(started_at: datetime | None, finished_at: datetime | None) -> str:
    """The time from start to finish (or to now while the run goes on), as ``duration`` writes
    it; ``—`` before it starts."""
    if started_at is None:
        return "—"
    seconds = ((finished_at or timezone.now()) - started_at).total_seconds()
    return duration(max(seconds, 0) * 1000)


def duration(ms: float | None) -> str:
    """The one way a duration reads (``console.js`` writes the same): ``340 ms`` under a
    second, ``2.41 s`` under a minute, then ``2 min 5 s``, ``1 h``, ``1 h 5 min``; ``""`` for none."""
    if ms is None:
        return ""
    if ms < 1000:
        return f"{ms:.0f} ms" if ms >= 1 or ms == 0 else f"{ms:.2f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.2f} s"
    seconds = round(ms / 1000)
    if seconds < 3600:
        minutes, rest = divmod(seconds, 60)
        return f"{minutes} min {rest} s" if rest else f"{minutes} min"
    hours, rest = divmod(round(seconds / 60), 60)
    return f"{hours} h {rest} min" if rest else f"{hours} h"


def for_page(step: dict[str, Any], *, final_sequence: int | None = None, cancel_who: str = "") -> dict[str, Any]:
    """A ``presenters.step_dict`` with what the template shows; ``final_sequence`` names the
    step holding the final answer (shown once, in the outcome, not again on its card), and
    ``cancel_who`` who cancelled the run (``by alice via api``), said on a step it cut short."""
    payload = step.get("payload") or {}
    interrupted = bool(payload.get("interrupted")) if isinstance(payload, dict) else False
    return {
        **step,
        "details": describe.lines(step["kind"], payload),
        "time": time_of(step.get("created_at")),
        "duration": duration(step.get("duration_ms")),
        "interrupted": interrupted,
        "cancel_who": cancel_who if interrupted else "",
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


def spend_text(run: Any, picture: Any) -> str:
    """The run's spend: settled, its row's cost; while it executes, its steps' so far with the
    price in force (never "not priced" for a priced model before its first costed step)."""
    if run.is_terminal:
        return pricing.cost_text(run)
    return pricing.running_cost_text(run, picture.spend.cost if picture.spend else None)
