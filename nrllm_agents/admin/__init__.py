"""The Django admin for runs, threads, notes, connections, prices and agents (importing this package registers them)."""

from __future__ import annotations

from .catalog import AgentAdmin, ConnectionAdmin, PriceAdmin
from .notes import NoteAdmin
from .runs import AgentRunAdmin
from .threads import ThreadAdmin

__all__ = ["AgentAdmin", "AgentRunAdmin", "ConnectionAdmin", "NoteAdmin", "PriceAdmin", "ThreadAdmin"]
