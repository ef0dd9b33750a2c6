"""The Django admin for runs, threads, notes, connections, prices, agents and budgets (importing this
package registers them)."""

from __future__ import annotations

from .budgets import BudgetAdmin
from .catalog import AgentAdmin, ConnectionAdmin, PriceAdmin
from .notes import NoteAdmin
from .runs import AgentRunAdmin
from .threads import ThreadAdmin

__all__ = ["AgentAdmin", "AgentRunAdmin", "BudgetAdmin", "ConnectionAdmin", "NoteAdmin", "PriceAdmin", "ThreadAdmin"]
