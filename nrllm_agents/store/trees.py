"""Trees of runs: a parent's suspension with its children's creation, the cancel of a subtree,
and the wake of a parent whose children have all ended. Every one is a fence.

The tree's root row is the serialisation point. Creating children and a cancel anywhere in the
tree both take it ``FOR NO KEY UPDATE``. So a spawn either commits before the cancel's subtree
is read (its children are cancelled with the rest), or waits for the cancel's commit and then
finds its own row cancelled (the cascade reached it): no child is created after a cancel of any
of its ancestors. Two parents of one tree spawn one after the other, so each counts the tree's
runs with every other spawn's children in it (``TREE_MAX_RUNS`` holds under a burst). On SQLite
every write transaction is ``IMMEDIATE``: they are serialised as a whole.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from ..domain import Step, StepKind, Usage
from ..models import ACTIVE, QUIESCENT, AgentRun, RunStatus, TerminationReason
from . import runs, tree_spend
from .cancels import cancel as cancel_run
from .cancels import cancel_fields, cancel_lone
from .journal import RECOVER, append_cancelled_to, append_event, next_sequence, owned, spend_fields, stop_stamp
from .results import NOT_FOUND, Transition, actor, checked_reason

_RUN = AgentRun._meta.db_table


@dataclass(frozen=True)
class Child:
    """A child run to create: its row's columns, the request its worker rehydrates, and the
    sub-agent call it answers. Its place in the tree (parent, root, depth) is the spawn's."""

    call_id: str
    fields: dict[str, Any]
    request_payload: dict[str, Any]
    name: str = ""  # the sub-agent call's tool name and arguments: its tool step, when refused
    arguments: Mapping[str, Any] = field(default_factory=dict)
    # what its first model call may cost at most, ``(cost, tokens)``, asked by its admission
    worst_case: Callable[[], tuple[Decimal, int]] | None = None


@dataclass(frozen=True)
class TreeCancel:
    """What a cancel of a run and its subtree did: the run's own ``Transition``, and the
    descendants it cancelled, by the status each had."""

    transition: Transition
    cascaded: dict[str, list[uuid.UUID]] = field(default_factory=dict)
    lone: bool = False  # the run was of no tree (``cancels.cancel_lone``): no parent to wake either

    @property
    def cascaded_total(self) -> int:
        return sum(len(ids) for ids in self.cascaded.values())


def _lock(run_id: uuid.UUID, mode: str) -> None:
    """Take the tree's serialisation lock (PostgreSQL; SQLite's IMMEDIATE transaction holds one)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute(f"SELECT 1 FROM {_RUN} WHERE id = %s FOR {mode}", [run_id])


def root_of(run_id: uuid.UUID) -> uuid.UUID | None:
    """The root of ``run_id``'s tree (itself for a root or a run of no tree); ``None``: no such run."""
    row = AgentRun.objects.filter(pk=run_id).values("tree_root_id").first()
    return None if row is None else (row["tree_root_id"] or run_id)


def subtree(run_id: uuid.UUID, root: uuid.UUID) -> list[uuid.UUID]:
    """Every descendant of ``run_id`` (not itself). A root's are one indexed read; a deeper run's,
    one read per level below it (the depth is bounded by ``MAX_TREE_DEPTH``)."""
    if run_id == root:
        return list(AgentRun.objects.filter(tree_root_id=root).values_list("pk", flat=True))
    found: list[uuid.UUID] = []
    level = [run_id]
    while level:
        level = list(AgentRun.objects.filter(tree_parent_id__in=level).values_list("pk", flat=True))
        found.extend(level)
    return found


def spawn(
    parent_id: uuid.UUID,
    owner: str,
    *,
    state: dict[str, Any],
    iterations: int,
    usage: Usage,
    children: Sequence[Child],
    max_runs: int = 0,
    admit: Callable[[Child], str | None] | None = None,
    round_: int = 0,
) -> Transition:
    """``running → waiting_for_children`` (by the owning segment) and the children's creation
    (``— → queued``), in one transaction fenced against every ancestor's cancel. Each child's
    ``max_cost``, ``max_total_tokens`` and deadline are its own, bounded by what remains of the
    parent's and each ancestor's (``tree_spend.remaining``).

    A child is admitted like any run before it is created: the tree holds fewer than
    ``max_runs`` runs (its root included; 0 or less: no bound), then ``admit`` (the caller's
    rate limit and budgets, which count it) returns ``None``. A child refused starts no run:
    its call gets its ``tool`` step (round ``round_``) in the parent's stream, with the refusal
    as its error, which the parent's model reads when it continues.

    Refused (nothing created) when the parent is no longer this segment's running run; a
    cancel of the parent or of any ancestor moved it to ``cancelled`` first. A child that
    exists for a call (a parent that spawns again after a crash) is kept, not created twice.
    ``data["children"]``: the ids created; ``data["refused"]``: call id → why.
    """
    created: list[uuid.UUID] = []
    refused: dict[str, str] = {}
    with transaction.atomic():
        root = root_of(parent_id) or parent_id
        _lock(root, "NO KEY UPDATE")
        n = owned(parent_id, owner).update(
            status=RunStatus.WAITING_FOR_CHILDREN,
            suspended_state=state,
            **spend_fields(iterations, usage),
            claimed_by="",
            lease_expires=None,
        )
        if not n:
            status = runs.probe_status(parent_id, fail_soft=False)
            return Transition(False, status, status)
        depth = AgentRun.objects.filter(pk=parent_id).values_list("tree_depth", flat=True).get()
        existing = set(
            AgentRun.objects.filter(
                tree_parent_id=parent_id, tree_call_id__in=[c.call_id for c in children]
            ).values_list("tree_call_id", flat=True)
        )
        # Under the tree's lock, after the parent's spend was written: what remains of its
        # ancestors' limits as of now bounds each child's (a child starts with what remains).
        left = tree_spend.remaining(parent_id, root)
        now = timezone.now()
        size = 1 + AgentRun.objects.filter(tree_root_id=root).count()  # under the lock: every spawn's children
        for child in children:
            if child.call_id in existing:
                continue
            place = {"tree_parent_id": parent_id, "tree_root_id": root, "tree_depth": depth + 1}
            fields = {**child.fields, **place, "tree_call_id": child.call_id}
            why = (
                f"its tree holds {size} runs, at most {max_runs} (TREE_MAX_RUNS)"
                if 0 < max_runs <= size
                else (admit(replace(child, fields=fields)) if admit is not None else None)
            )
            if why is not None:
                refused[child.call_id] = why = f"the sub-agent run was not started: {why}"
                payload = {"call_id": child.call_id, "name": child.name, "arguments": dict(child.arguments)}
                step = Step(StepKind.TOOL, round_, {**payload, "result": None, "error": why}, duration_ms=0.0)
                append_event(parent_id, next_sequence(parent_id), step, now)
                continue
            payload = dict(child.request_payload)
            tree_spend.capped(fields, payload, left, now)
            row = runs.create_queued(fields, payload)
            created.append(row.pk)
            size += 1
    return Transition(
        True, RunStatus.WAITING_FOR_CHILDREN, RunStatus.RUNNING, {"children": created, "refused": refused}
    )


def wake(parent_id: uuid.UUID) -> bool:
    """``waiting_for_children → queued`` once none of its children is active: the parent then
    continues from its stream (its sub-agent calls answered by their runs).

    Each child calls this after its own end committed, and the parent's row lock orders them:
    the last child to end always finds the others ended. Returns whether the parent moved.
    """
    with transaction.atomic():
        status = AgentRun.objects.select_for_update().filter(pk=parent_id).values_list("status", flat=True).first()
        if status != RunStatus.WAITING_FOR_CHILDREN:
            return False
        if AgentRun.objects.filter(tree_parent_id=parent_id, status__in=[s.value for s in ACTIVE]).exists():
            return False
        n = AgentRun.objects.filter(pk=parent_id, status=RunStatus.WAITING_FOR_CHILDREN).update(
            status=RunStatus.QUEUED, request_payload=RECOVER, suspended_state=None
        )
    return bool(n)


def stranded_parents(limit: int = 100) -> list[uuid.UUID]:
    """Runs waiting for children none of which is active: a wake that never came (the process of
    the last child died between its end and the wake, or the reaper ended that child)."""
    active = AgentRun.objects.filter(tree_parent_id=OuterRef("pk"), status__in=[s.value for s in ACTIVE])
    return list(
        AgentRun.objects.filter(status=RunStatus.WAITING_FOR_CHILDREN)
        .filter(~Exists(active))
        .order_by()
        .values_list("pk", flat=True)[:limit]
    )


def parent_of(run_id: uuid.UUID) -> uuid.UUID | None:
    """The run whose sub-agent call started ``run_id``; ``None`` for a root or a run of no tree."""
    parent: uuid.UUID | None = AgentRun.objects.filter(pk=run_id).values_list("tree_parent_id", flat=True).first()
    return parent


def awaiting_approval_below(run_id: uuid.UUID) -> list[uuid.UUID]:
    """The runs below ``run_id`` (not itself) waiting for approval, oldest first."""
    root = root_of(run_id)
    if root is None:
        return []
    below = subtree(run_id, root)
    waiting = AgentRun.objects.filter(pk__in=below, status=RunStatus.WAITING_FOR_APPROVAL)
    return list(waiting.order_by("created_at", "pk").values_list("pk", flat=True))


def parent_to_wake(run_id: uuid.UUID) -> uuid.UUID | None:
    """The parent of ``run_id`` when ``run_id`` was cancelled on its own (no cancel inherited
    from above, so nothing above is being cancelled): its end may be the last its parent waits
    for. ``None`` otherwise (still active, or inherited a cancel that covers its parent too)."""
    row = (
        AgentRun.objects.filter(pk=run_id, status=RunStatus.CANCELLED).values("tree_parent_id", "cancel_detail").first()
    )
    if row is None or row["tree_parent_id"] is None:
        return None
    detail = row["cancel_detail"]
    return None if isinstance(detail, dict) and "inherited" in detail else row["tree_parent_id"]


def child_of(parent_id: uuid.UUID, call_id: str) -> dict[str, Any] | None:
    """The child run answering ``call_id`` of ``parent_id`` (what its parent's tool step needs)."""
    row = (
        AgentRun.objects.filter(tree_parent_id=parent_id, tree_call_id=call_id)
        .values("id", "status", "termination_reason", "final_text", "error_class", "error_message", "cancel_reason")
        .first()
    )
    return None if row is None else dict(row)


def cancel_tree(
    run_id: uuid.UUID,
    *,
    by: Any = None,
    source: str,
    reason: str = "",
    termination_reason: str = TerminationReason.CANCELLED,
    detail: dict[str, Any] | None = None,
) -> TreeCancel:
    """Cancel a run (``cancels.cancel``, the same fence) and every active run below it, in one
    transaction under the tree's lock; a repeated cancel changes nothing.

    Each descendant is cancelled by the same who, from where and why, and its ``cancel_detail``
    names the run whose cancel it inherited (``{"inherited": {"run_id", "by", "source",
    "reason"}}``), as its ``cancelled`` step does. Quiescent descendants get that step here;
    running ones from their segment (the NOTIFY trigger fires for every cancelled row).

    A run of no tree (no root, no run below it) is cancelled as before trees, by one statement
    (``cancels.cancel_lone``) that takes no tree's lock and reads no tree.
    """
    reason = checked_reason(reason)
    lone = cancel_lone(
        run_id, by=by, source=source, reason=reason, termination_reason=termination_reason, detail=detail
    )
    if lone is not None:
        return TreeCancel(lone, lone=True)
    with transaction.atomic():
        root = root_of(run_id)
        if root is None:
            return TreeCancel(NOT_FOUND)
        if root != run_id:
            _lock(root, "NO KEY UPDATE")  # the cancel of the root itself locks its row in its fence
        fence = cancel_run(
            run_id, by=by, source=source, reason=reason, termination_reason=termination_reason, detail=detail
        )
        if not fence.applied:
            return TreeCancel(fence)
        cascaded = cascade(
            run_id, root, by=by, source=source, reason=reason, termination_reason=termination_reason, limit=detail
        )
    return TreeCancel(fence, cascaded)


def cascade(
    run_id: uuid.UUID,
    root: uuid.UUID,
    *,
    by: Any,
    source: str,
    reason: str,
    termination_reason: str = TerminationReason.CANCELLED,
    limit: dict[str, Any] | None = None,
) -> dict[str, list[uuid.UUID]]:
    """Cancel every active run below ``run_id`` (just cancelled, in the caller's transaction,
    which holds the tree's lock), each naming the cancel it inherits; returns them by the status
    each had. Quiescent ones get their ``cancelled`` step here. A limit's cancel (a spent tree)
    gives each its ``termination_reason``, and the limit inside what it inherited."""
    active = AgentRun.objects.filter(status__in=[s.value for s in ACTIVE])
    if run_id == root:  # a root's active descendants: one indexed read
        found = dict(active.filter(tree_root_id=root).exclude(pk=root).values_list("pk", "status"))
    else:
        below = subtree(run_id, root)
        found = dict(active.filter(pk__in=below).values_list("pk", "status")) if below else {}
    if not found:
        return {}
    now = timezone.now()  # after the tree's lock: every step of the tree committed before it
    inherited: dict[str, Any] = {"run_id": str(run_id), "by": actor(by)[1], "source": str(source), "reason": reason}
    if limit:
        inherited["limit"] = limit
    detail = {"inherited": inherited}
    common = cancel_fields(
        now, by=by, source=source, reason=reason, termination_reason=termination_reason, detail=detail
    )
    cascaded: dict[str, list[uuid.UUID]] = {}
    for status in sorted({*found.values()}):
        ids = [pk for pk, s in found.items() if s == status]
        extra = {} if status == RunStatus.RUNNING else {"stopped_at": stop_stamp(now), "lease_expires": None}
        if AgentRun.objects.filter(pk__in=ids, status=status).update(**common, **extra):
            cascaded[status] = ids
    quiescent = [pk for s, ids in cascaded.items() if s in QUIESCENT for pk in ids]
    if quiescent:
        append_cancelled_to(
            AgentRun.objects.filter(pk__in=quiescent, status=RunStatus.CANCELLED, cancel_requested_at=now), now
        )
    return cascaded


def lock_trees(run_ids: Any) -> None:
    """Take the lock of every tree the runs ``run_ids`` (a queryset of ids) lead or belong to, in
    one order and one statement (a bulk cancel, before it cancels them: no spawn below them
    commits meanwhile). On SQLite the write transaction already holds the database."""
    if connection.vendor != "postgresql":
        return
    roots = AgentRun.objects.filter(pk__in=run_ids).exclude(tree_root_id=None).values("tree_root_id")
    leads = AgentRun.objects.filter(tree_parent_id__in=run_ids).values("tree_parent_id")
    trees = AgentRun.objects.filter(Q(pk__in=roots) | Q(pk__in=leads)).order_by("pk")
    list(trees.select_for_update(no_key=True).values_list("pk", flat=True))
