"""What a tree of runs has spent, and what remains of the limits of a run's ancestors.

A run's ``max_cost``, ``max_total_tokens`` and deadline bound its whole subtree
(``runtime.limits``). Both reads here are one query over the tree (``tree_root_id``, indexed):
its rows are few (bounded by ``MAX_TREE_DEPTH`` and ``MAX_FAN_OUT``), and each ancestor's
subtree is summed from them. A run's own row holds what it spent as of its last boundary
that wrote it (``record``): a running run of a limited tree writes it after each model answer.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db.models import Q

from ..domain import Usage
from ..domain.steps import decimal_text
from ..models import AgentRun, RunStatus
from .journal import spend_fields

LEAST_COST = Decimal("0.000000000001")  # the max_cost column's smallest step

_COLUMNS = (
    "pk",
    "tree_parent_id",
    "prompt_tokens",
    "completion_tokens",
    "cost",
    "max_total_tokens",
    "max_cost",
    "deadline_at",
)


@dataclass(frozen=True)
class Member:
    """One run of a tree: its place, what it spent, and its limits."""

    id: uuid.UUID
    parent: uuid.UUID | None
    tokens: int
    cost: Decimal
    max_total_tokens: int | None
    max_cost: Decimal | None
    deadline_at: datetime | None


@dataclass(frozen=True)
class Spent:
    """What a run and every run below it spent."""

    tokens: int = 0
    cost: Decimal = Decimal(0)


@dataclass(frozen=True)
class Remaining:
    """The tightest of what remains of a lineage's limits (``None``: that limit bounds none of it)."""

    max_total_tokens: int | None = None
    max_cost: Decimal | None = None
    deadline_at: datetime | None = None


def members(root: uuid.UUID) -> dict[uuid.UUID, Member]:
    """Every run of ``root``'s tree, the root included, by id (one query)."""
    rows = AgentRun.objects.filter(Q(pk=root) | Q(tree_root_id=root)).order_by().values_list(*_COLUMNS)
    return {
        pk: Member(pk, parent, prompt + completion, cost or Decimal(0), max_tokens, max_cost, deadline)
        for pk, parent, prompt, completion, cost, max_tokens, max_cost, deadline in rows
    }


def lineage(tree: Mapping[uuid.UUID, Member], run_id: uuid.UUID) -> list[Member]:
    """``run_id`` and its ancestors, the root first (those of them in ``tree``)."""
    chain: list[Member] = []
    at: uuid.UUID | None = run_id
    while at is not None and at in tree and len(chain) <= len(tree):
        chain.append(tree[at])
        at = tree[at].parent
    return chain[::-1]


def spent_below(tree: Mapping[uuid.UUID, Member]) -> dict[uuid.UUID, Spent]:
    """What each run of ``tree`` and its subtree spent."""
    children: dict[uuid.UUID | None, list[uuid.UUID]] = {}
    for member in tree.values():
        children.setdefault(member.parent, []).append(member.id)
    totals: dict[uuid.UUID, Spent] = {}

    def total(pk: uuid.UUID) -> Spent:
        if pk not in totals:
            own = tree[pk]
            below = [total(c) for c in children.get(pk, []) if c != pk]
            totals[pk] = Spent(
                own.tokens + sum(s.tokens for s in below), own.cost + sum((s.cost for s in below), Decimal(0))
            )
        return totals[pk]

    for pk in tree:
        total(pk)
    return totals


def remaining(parent_id: uuid.UUID, root: uuid.UUID) -> Remaining:
    """What remains of the limits of ``parent_id`` and of each of its ancestors, the tightest of
    each (never below zero): what a child created now may spend at most."""
    tree = members(root)
    spent = spent_below(tree)
    tokens: list[int] = []
    costs: list[Decimal] = []
    deadlines: list[datetime] = []
    for member in lineage(tree, parent_id):
        if member.max_total_tokens is not None:
            tokens.append(max(member.max_total_tokens - spent[member.id].tokens, 0))
        if member.max_cost is not None:
            costs.append(max(member.max_cost - spent[member.id].cost, Decimal(0)))
        if member.deadline_at is not None:
            deadlines.append(member.deadline_at)
    return Remaining(min(tokens, default=None), min(costs, default=None), min(deadlines, default=None))


def record(run_id: uuid.UUID, usage: Usage) -> None:
    """Write what a running run spent so far on its row, where its tree's checks read it."""
    AgentRun.objects.filter(pk=run_id, status=RunStatus.RUNNING).update(**spend_fields(None, usage))


def over(run_id: uuid.UUID, root: uuid.UUID) -> tuple[Member, str, Any, Any] | None:
    """The highest run of ``run_id``'s lineage whose subtree spent more than its limit, as
    ``(that run, limit, value, measured)`` (``limit``: ``max_total_tokens`` or ``max_cost``), or
    ``None``. The highest: its cancel covers every other run the spend passed the limit of. A
    run with no run below it is left to its own check (``limits.exceeded``)."""
    tree = members(root)
    spent = spent_below(tree)
    leads = any(m.parent == run_id for m in tree.values())
    for member in lineage(tree, run_id):
        if member.id == run_id and not leads:
            continue  # a run with nothing below it: its own limit, checked as any run's
        below = spent[member.id]
        if member.max_total_tokens is not None and below.tokens > member.max_total_tokens:
            return member, "max_total_tokens", member.max_total_tokens, below.tokens
        if member.max_cost is not None and below.cost > member.max_cost:
            return member, "max_cost", member.max_cost, below.cost
    return None


def capped(fields: dict[str, Any], payload: dict[str, Any], limits: Remaining, now: datetime) -> None:
    """Bound a child's limits (its row's ``fields`` and its ``payload``, in place) by what remains
    of its ancestors': each is the tighter of its own and theirs. A limit already spent leaves
    the least a request may carry (one token, one second, the smallest amount): the child stops
    at its first boundary, as the tree's check would have stopped it."""
    if limits.max_total_tokens is not None:
        own = fields.get("max_total_tokens")
        fields["max_total_tokens"] = max(
            limits.max_total_tokens if own is None else min(own, limits.max_total_tokens), 1
        )
        payload["max_total_tokens"] = fields["max_total_tokens"]
    if limits.max_cost is not None:
        own = fields.get("max_cost")
        cost = limits.max_cost if own is None else min(Decimal(own), limits.max_cost)
        fields["max_cost"] = max(cost, LEAST_COST)
        payload["max_cost"] = decimal_text(fields["max_cost"])
    own_deadline = fields.get("deadline_at")
    if limits.deadline_at is not None and (own_deadline is None or limits.deadline_at < own_deadline):
        fields["deadline_at"] = limits.deadline_at
        fields["deadline_seconds"] = max(math.ceil((limits.deadline_at - now).total_seconds()), 1)
        payload["deadline_seconds"] = fields["deadline_seconds"]
