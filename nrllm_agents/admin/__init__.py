"""The Django admin for runs, threads, notes, connections, prices and agents (importing this package registers them)."""

from __future__ import annotations

from .notes import NoteAdmin
from .runs import AgentRunAdmin
from .setup import AgentAdmin, ConnectionAdmin, PriceAdmin
from .threads import ThreadAdmin

__all__ = ["AgentAdmin", "AgentRunAdmin", "ConnectionAdmin", "NoteAdmin", "PriceAdmin", "ThreadAdmin"]
