"""The Django admin for runs, notes, connections and prices (importing this package registers them)."""

from __future__ import annotations

from .notes import NoteAdmin
from .runs import AgentRunAdmin
from .setup import AgentAdmin, ConnectionAdmin, PriceAdmin

__all__ = ["AgentAdmin", "AgentRunAdmin", "ConnectionAdmin", "NoteAdmin", "PriceAdmin"]
