"""A run's step stream as compact, read-only timeline rows for the admin change page.

The words come from ``describe`` (the one step describer), clipped as on the playground; a long
value scrolls in its box (admin.css). The template escapes them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from ..models import AgentRunEvent
from ..presentation import describe
from ..web import display
from . import columns


@dataclass(frozen=True)
class TimelineRow:
    """One step, ready for the template: its header columns and ``(label, text)`` lines."""

    sequence: int
    kind: str
    round: int
    duration_ms: float | None
    created_at: datetime
    lines: list[tuple[str, str]]
    failed: bool = False  # a tool error, or a model call that failed (never a step a cancel cut short)
    interrupted: bool = False  # cut short by a cancel: a decision, styled as one
    cancel_who: str = ""  # who cancelled (``by alice via api``), on a step the cancel cut short

    @property
    def duration(self) -> str:
        return display.duration(self.duration_ms)

    @property
    def when(self) -> str:
        return columns.when(self.created_at)


def rows(events: Iterable[AgentRunEvent]) -> list[TimelineRow]:
    """The timeline rows for events, in the order given."""
    events = list(events)
    cancel = next((e.payload for e in events if e.kind == "cancelled" and isinstance(e.payload, dict)), None)
    who = describe.who_cancelled(cancel) if cancel else ""
    return [
        TimelineRow(
            e.sequence,
            e.kind,
            e.round,
            e.duration_ms,
            e.created_at,
            describe.lines(e.kind, e.payload, limit=describe.PAGE_CHARS),
            isinstance(e.payload, dict) and e.payload.get("error") is not None and not e.payload.get("interrupted"),
            isinstance(e.payload, dict) and bool(e.payload.get("interrupted")),
            who if isinstance(e.payload, dict) and e.payload.get("interrupted") else "",
        )
        for e in events
    ]


def call_text(call: object) -> str:
    """A tool call as ``name({...arguments})``, clipped for a list column."""
    return describe.clip(describe.call_text(call), describe.TIMELINE_CHARS)


def clip(text: str, limit: int = describe.TIMELINE_CHARS) -> str:
    return describe.clip(text, limit)
