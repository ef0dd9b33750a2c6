"""The Django admin for runs, threads and notes (importing this package registers them)."""

from __future__ import annotations

from .notes import NoteAdmin
from .runs import AgentRunAdmin
from .threads import ThreadAdmin

__all__ = ["AgentRunAdmin", "NoteAdmin", "ThreadAdmin"]
