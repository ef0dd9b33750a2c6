"""How a tree of runs reads (REST, admin): a run's children and the spend of its subtree."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db.models import Sum

from ..models import AgentRun, RunStatus
from ..store import trees as tree_store
from .presenters import amount_text


def place(run: AgentRun) -> dict[str, Any]:
    """Where a run sits in its tree: its parent, its root (itself for a run no sub-agent call
    started) and its depth; its own columns, no query."""
    return {
        "parent_id": str(run.tree_parent_id) if run.tree_parent_id else None,
        "root_id": str(run.tree_root_id or run.pk),
        "depth": run.tree_depth,
    }


def tree_dict(run: AgentRun) -> dict[str, Any]:
    """A run's children (status, spend, which call started each), the runs below it waiting for
    approval, and what its whole subtree spent (the run included): tokens and cost summed over
    every run of it."""
    children = AgentRun.objects.filter(tree_parent_id=run.pk).order_by("created_at", "pk")
    below = tree_store.subtree(run.pk, run.tree_root_id or run.pk)
    totals = AgentRun.objects.filter(pk__in=[run.pk, *below]).aggregate(
        prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens"), cost=Sum("cost")
    )
    estimated = AgentRun.objects.filter(pk__in=[run.pk, *below], cost_estimated=True).exists()
    cost: Decimal | None = totals["cost"]
    return {
        "awaiting_approval": awaiting_approval(below),
        "children": [
            {
                "run_id": str(c.pk),
                "agent": (c.agent_snapshot or {}).get("name"),
                "status": c.status,
                "call_id": c.tree_call_id,
                "tokens": c.prompt_tokens + c.completion_tokens,
                "cost": amount_text(c.cost),
            }
            for c in children
        ],
        "runs": 1 + len(below),
        "spend": {
            "prompt_tokens": totals["prompt"] or 0,
            "completion_tokens": totals["completion"] or 0,
            "total_tokens": (totals["prompt"] or 0) + (totals["completion"] or 0),
            "cost": amount_text(cost),
            "cost_estimated": estimated,
        },
    }


def awaiting_approval(below: list[Any]) -> list[dict[str, Any]]:
    """The runs of ``below`` waiting for approval: which tools of which run a decision on the
    root (``POST /api/runs/{root}/approve/``, ``agent_approve``) would decide."""
    if not below:
        return []
    waiting = AgentRun.objects.filter(pk__in=below, status=RunStatus.WAITING_FOR_APPROVAL).order_by("created_at", "pk")
    entries = []
    for r in waiting.only("pk", "tree_depth", "agent_snapshot", "suspended_state"):
        calls = (r.suspended_state or {}).get("pending_calls", [])
        tools = [str(c.get("name")) for c in calls if isinstance(c, dict)]
        entries.append(
            {
                "run_id": str(r.pk),
                "depth": r.tree_depth,
                "agent": (r.agent_snapshot or {}).get("name"),
                "tools": tools,
                "call_ids": [str(c.get("id")) for c in calls if isinstance(c, dict)],
                "detail": f"waits for the approval of {', '.join(tools) or 'its calls'} in run {r.pk}",
            }
        )
    return entries


def outline(run: AgentRun) -> list[dict[str, Any]]:
    """The tree below and including ``run``, depth first in the order the children were created:
    one entry per run (its id, depth, agent, status, tokens, cost)."""
    root = run.tree_root_id or run.pk
    rows = {
        r.pk: r
        for r in AgentRun.objects.filter(pk__in=[run.pk, *tree_store.subtree(run.pk, root)]).order_by(
            "created_at", "pk"
        )
    }
    below: dict[Any, list[AgentRun]] = {}
    for r in rows.values():
        below.setdefault(r.tree_parent_id, []).append(r)
    entries: list[dict[str, Any]] = []
    stack = [run]
    while stack:
        r = stack.pop()
        entries.append(
            {
                "run_id": str(r.pk),
                "depth": r.tree_depth,
                "agent": (r.agent_snapshot or {}).get("name"),
                "status": r.status,
                "tokens": r.prompt_tokens + r.completion_tokens,
                "cost": amount_text(r.cost),
            }
        )
        stack.extend(reversed(below.get(r.pk, [])))
    return entries
