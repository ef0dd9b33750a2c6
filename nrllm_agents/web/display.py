"""What the run page shows around a step; the step's words come from ``describe``.

The browser stream sends the same ``details`` with each live step (``web/stream.py``), so a
step reads the same whether the server rendered the page or the stream added it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

from .. import describe


def time_of(iso: str | None) -> str:
    """``HH:MM:SS`` of a stored ISO timestamp (UTC), or an empty string."""
    return iso[11:19] if iso and len(iso) >= 19 else ""


def elapsed(started_at: datetime | None, finished_at: datetime | None) -> str:
    """``12.3 s`` from start to finish (or to now while the run goes on); ``—`` before it starts."""
    if started_at is None:
        return "—"
    seconds = ((finished_at or timezone.now()) - started_at).total_seconds()
    return f"{max(seconds, 0):.1f} s"


def for_page(step: dict[str, Any]) -> dict[str, Any]:
    """A ``presenters.step_dict`` with what the template shows."""
    return {
        **step,
        "details": describe.lines(step["kind"], step.get("payload")),
        "time": time_of(step.get("created_at")),
        "interrupted": bool((step.get("payload") or {}).get("interrupted")),
    }
