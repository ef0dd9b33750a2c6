"""Set-based cancellation: on PostgreSQL, a constant number of statements whatever the
selection's size. The ``cancelled`` steps it appends carry the payload a single cancel's step
carries (``journal.cancel_payload``); a test compares the two, and the bulk's two paths."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from ..domain import StepKind
from ..models import ACTIVE, QUIESCENT, TERMINAL, AgentRun, AgentRunEvent, RunStatus
from . import prepared, trees
from .cancels import cancel_fields
from .journal import append_cancelled_to, cancel_payload, stop_stamp
from .results import checked_reason

_RUN, _EVENT = AgentRun._meta.db_table, AgentRunEvent._meta.db_table


@dataclass(frozen=True)
class BulkCancel:
    """What a set-based cancel found and did, by the status each selected run had."""

    cancelled: dict[str, int]  # previous status -> runs this call cancelled
    unchanged: dict[str, int]  # terminal status -> runs left as they were
    dry_run: bool = False
    cascaded: int = 0  # runs below the selected ones (their sub-agents') cancelled with them

    @property
    def cancelled_total(self) -> int:
        return sum(self.cancelled.values())


def cancel_many(selection: Any, *, by: Any = None, source: str, reason: str = "", dry_run: bool = False) -> BulkCancel:
    """Cancel every active run a queryset selects, with a constant number of statements on
    PostgreSQL.

    On PostgreSQL the active rows are locked first and stamped with the time after that.
    Queued and waiting runs are quiescent: they are stamped ``stopped_at`` and get their
    ``cancelled`` step (in one ``INSERT ... SELECT`` on PostgreSQL). Running runs stop at their next
    boundary and acknowledge it themselves. Terminal runs are counted, never touched. Raises
    ``InvalidArgument`` for a reason that cannot be recorded.
    """
    reason = checked_reason(reason)
    from django.db.models import Count

    with transaction.atomic():
        found = dict(selection.order_by().values_list("status").annotate(n=Count("pk")))
        unchanged = {s: n for s, n in found.items() if s in TERMINAL}
        if dry_run:
            return BulkCancel({s: n for s, n in found.items() if s not in TERMINAL}, unchanged, True)
        active_ids = selection.filter(status__in=[s.value for s in ACTIVE]).order_by().values("pk")
        trees.lock_trees(active_ids)  # no spawn below a selected run commits while it is cancelled
        now = _lock_active(selection) or timezone.now()
        common = cancel_fields(now, by=by, source=source, reason=reason)
        cancelled: dict[str, int] = {}
        for status in (
            RunStatus.QUEUED,
            RunStatus.WAITING_FOR_APPROVAL,
            RunStatus.WAITING_FOR_CHILDREN,
            RunStatus.RUNNING,
        ):
            # Running runs keep their lease: their segment (or the reaper) acknowledges.
            extra = {} if status == RunStatus.RUNNING else {"stopped_at": stop_stamp(now), "lease_expires": None}
            n = selection.filter(status=status).order_by().update(**extra, **common)
            if n:
                cancelled[status.value] = n
        if any(cancelled.get(s) for s in QUIESCENT):
            _append_cancelled_bulk(now, by, source, reason or "")
        cascaded = 0
        just = selection.filter(status=RunStatus.CANCELLED, cancel_requested_at=now).order_by().values("pk")
        parents = AgentRun.objects.filter(tree_parent_id__in=just, status__in=[s.value for s in ACTIVE])
        for parent, root in AgentRun.objects.filter(pk__in=parents.values("tree_parent_id")).values_list(
            "pk", "tree_root_id"
        ):
            below = trees.cascade(parent, root or parent, by=by, source=source, reason=reason or "")
            cascaded += sum(len(ids) for ids in below.values())
    return BulkCancel(cancelled, unchanged, cascaded=cascaded)


def _lock_active(selection: Any) -> datetime | None:
    """PostgreSQL: lock every active run of the selection, then read the clock (one statement).

    The cancels are stamped with that time, so a step committed while the bulk cancel waited
    for a row never looks later than the cancel. ``None`` elsewhere (SQLite's IMMEDIATE
    transaction already holds the write lock, so the caller's clock is read after it).
    """
    from django.db import connection

    if connection.vendor != "postgresql":
        return None
    # By primary key through a subquery: the selection may be DISTINCT (an admin search),
    # which FOR UPDATE does not allow.
    active = (
        AgentRun.objects.filter(pk__in=selection.order_by().values("pk"), status__in=[s.value for s in ACTIVE])
        .order_by()
        .select_for_update()
    )
    sql, params = active.values("pk").query.sql_with_params()
    with connection.cursor() as cur:
        # The aggregate consumes (locks) every row before clock_timestamp() is evaluated.
        cur.execute(f"SELECT count(*), clock_timestamp() FROM ({sql}) AS locked", params)
        row = cur.fetchone()
        stamp: datetime | None = row[1] if row else None
        return stamp


_APPEND_SQL = f"""
INSERT INTO {_EVENT} (run_id, sequence, kind, round, duration_ms, payload, created_at)
SELECT r.id, COALESCE(m.mx + 1, 0), '{StepKind.CANCELLED.value}', 0, NULL,
       %s::jsonb || jsonb_build_object('boundary_sequence', m.mx), %s
FROM {_RUN} r CROSS JOIN LATERAL (SELECT MAX(e.sequence) AS mx FROM {_EVENT} e WHERE e.run_id = r.id) m
WHERE r.status = '{RunStatus.CANCELLED.value}' AND r.cancel_requested_at = %s AND r.stopped_at IS NOT NULL
"""


def _append_cancelled_bulk(now: datetime, by: Any, source: str, reason: str) -> None:
    """Append ``cancelled`` to every quiescent run this batch stopped (those stamped ``now``).

    On PostgreSQL one ``INSERT ... SELECT`` whatever the batch's size: every run of the batch
    was cancelled with the same fields, so its payload (``journal.cancel_payload``) is built
    once here and the statement adds only the boundary's sequence, which it alone knows.
    Elsewhere one read, then one insert per batch of rows (``bulk_create``), each payload built
    from its row by the same function. A test writes both and compares.
    """
    if not prepared.enabled():
        append_cancelled_to(
            AgentRun.objects.filter(status=RunStatus.CANCELLED, cancel_requested_at=now, stopped_at__isnull=False), now
        )
        return
    from django.db import connection

    step = cancel_payload(cancel_fields(now, by=by, source=source, reason=reason), None)
    del step["boundary_sequence"]  # filled in by the statement
    ts = connection.ops.adapt_datetimefield_value(now)
    with connection.cursor() as cur:
        cur.execute(_APPEND_SQL, [json.dumps(step), ts, ts])
