"""The protocol's JSON objects: ``Assistant``, ``Thread`` and ``Run``, from our rows."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..models import Agent, AgentRun, Thread
from . import state as st
from .statuses import run_status, thread_status

GRAPH_ID = "agent"  # every saved agent runs the same graph: the tool loop


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def assistant(agent: Agent) -> dict[str, Any]:
    """A saved agent as an ``Assistant``: its name is the ``assistant_id``."""
    latest = agent.latest()
    return {
        "assistant_id": agent.name,
        "graph_id": GRAPH_ID,
        "name": agent.name,
        "description": agent.description or None,
        "config": {"configurable": dict(latest.definition) if latest else {}},
        "context": dict(latest.definition) if latest else {},
        "metadata": {"created_by": "nrllm_agents"},
        "version": latest.version if latest else 1,
        "created_at": _iso(agent.created_at),
        "updated_at": _iso(agent.updated_at),
    }


def run(row: AgentRun) -> dict[str, Any]:
    """A run as a ``Run``."""
    updated = row.stopped_at or row.finished_at or row.started_at or row.created_at
    return {
        "run_id": str(row.pk),
        "thread_id": str(row.thread_id) if row.thread_id else None,
        "assistant_id": (row.agent_snapshot or {}).get("name") or GRAPH_ID,
        "created_at": _iso(row.created_at),
        "updated_at": _iso(updated),
        "status": run_status(row),
        "metadata": dict(row.metadata or {}),
        "multitask_strategy": row.multitask_strategy or "reject",
        "kwargs": {},
        "cancel_reason": row.cancel_reason or None,
    }


def thread(row: Thread) -> dict[str, Any]:
    """A thread as a ``Thread``, with its current values and interrupts."""
    last = st.latest_run(row)
    pending = st.interrupts(last)
    return {
        "thread_id": str(row.pk),
        "created_at": _iso(row.created_at),
        "updated_at": _iso(row.last_activity_at),
        "metadata": dict(row.metadata or {}),
        "status": thread_status(last),
        "values": st.values(row.pk, last) if last is not None else {"messages": []},
        "interrupts": {str(last.pk): pending} if pending and last is not None else {},
    }
