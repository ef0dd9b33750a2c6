"""The Agent Protocol (the LangGraph Platform API): our runs as the LangGraph SDKs see them.

Assistants are saved agents (their name is the ``assistant_id``), threads are our threads, runs
our runs, interrupts our approvals. Every view asks ``access.policy``, spends the same rate
limits and slots (``admission``) and calls ``AgentRuntime``: nothing here writes a status.
Mounted by ``urls`` (``config/urls.py`` serves it at ``/lg/``). ``docs/agent-protocol.md``
holds the mapping tables.
"""

from __future__ import annotations

__all__ = ["urls"]
