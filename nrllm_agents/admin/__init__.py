"""The Django admin for runs and notes (importing this package registers both)."""

from __future__ import annotations

from .notes import NoteAdmin
from .runs import AgentRunAdmin

__all__ = ["AgentRunAdmin", "NoteAdmin"]
