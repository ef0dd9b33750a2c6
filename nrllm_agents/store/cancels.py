"""The cancel: ``queued / running / waiting_for_approval → cancelled``, both of its paths.

On PostgreSQL it is one round trip: one prepared statement, still a row-lock fence
(``_cancel_statement``); elsewhere, and in the one case the statement leaves to it, the
read-check-write fence (``_cancel_fence``). Both write the same row and the same ``cancelled``
step, whose payload is built once, in Python (``journal.cancel_payload``); the statement adds
only what it alone knows, the time and the boundary's sequence. A test writes both and compares.

The statement stamps the time once the row lock is held and returns the status the lock found, so
the caller builds the same ``Transition`` as the fence. A quiescent run whose row changed while
the statement waited is left to the fence (the statement's snapshot could miss steps): it then
writes nothing and reports ``None``. The statement step by step: docs/internals.md ("The
one-statement cancel").
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from ..domain import StepKind
from ..models import ACTIVE, QUIESCENT, TERMINAL, AgentRun, AgentRunEvent, RunStatus, TerminationReason
from . import prepared
from .journal import append_cancelled, cancel_payload, stop_stamp
from .results import NOT_FOUND, Transition, actor, checked_reason

_RUN, _EVENT = AgentRun._meta.db_table, AgentRunEvent._meta.db_table
_ACTIVE = "(" + ", ".join(f"'{s.value}'" for s in sorted(ACTIVE)) + ")"

# Parameters: id, id, reason code, by id, by name, source, reason text, detail (JSON or NULL),
# the cancelled step's payload (JSON, built by journal.cancel_payload). ``{lone}``: whether the
# row may be cancelled by this statement alone (see _LONE below).
_CANCEL_TEMPLATE = f"""
WITH locked AS (
    -- fresh: the locked row is the version this statement's snapshot saw; only a quiescent
    -- run needs it (the CASE skips the second look-up for a running one)
    SELECT r.id, r.status, r.provider,
           CASE WHEN r.status = 'running' THEN true
                ELSE r.xmin = (SELECT s.xmin FROM {_RUN} s WHERE s.id = %s) END AS fresh,
           {{lone}} AS lone
    FROM {_RUN} r WHERE r.id = %s FOR UPDATE OF r
), stamp AS (
    SELECT clock_timestamp() AS at FROM locked
), changed AS (
    UPDATE {_RUN} r SET
        status = 'cancelled', termination_reason = %s, cancelled_by_id = %s, cancelled_by_name = COALESCE(%s, ''),
        cancel_source = %s,
        cancel_reason = %s, cancel_detail = %s::jsonb, cancel_requested_at = t.at,
        finished_at = GREATEST(t.at, COALESCE(r.started_at, r.created_at)),
        request_payload = NULL, suspended_state = NULL,
        stopped_at = CASE WHEN l.status = 'running' THEN r.stopped_at
                          ELSE GREATEST(t.at, COALESCE(r.started_at, r.created_at)) END,
        lease_expires = CASE WHEN l.status = 'running' THEN r.lease_expires END
    FROM locked l, stamp t
    WHERE r.id = l.id AND l.status IN {_ACTIVE} AND (l.status = 'running' OR l.fresh) AND l.lone
    RETURNING r.id, l.status AS previous, t.at, r.cancel_source, r.cancel_reason, r.termination_reason,
              r.cancel_detail
), appended AS (
    INSERT INTO {_EVENT} (run_id, sequence, kind, round, duration_ms, payload, created_at)
    SELECT c.id, COALESCE(m.mx + 1, 0), '{StepKind.CANCELLED.value}', 0, NULL,
           %s::jsonb || jsonb_build_object(
               'requested_at', to_char(c.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'),
               'boundary_sequence', m.mx),
           c.at
    FROM changed c CROSS JOIN LATERAL (SELECT MAX(e.sequence) AS mx FROM {_EVENT} e WHERE e.run_id = c.id) m
    WHERE c.previous <> 'running'
)
SELECT l.status, l.fresh, (SELECT count(*) FROM changed), l.provider, l.lone FROM locked l
"""
_CANCEL_SQL = _CANCEL_TEMPLATE.format(lone="true")
# A run of no tree: it belongs to none (no root) and leads none (no run names it as its root; the
# partial index on tree_root answers). Read in the statement's snapshot, which a run spawning its
# first children after it was taken cannot fool: the spawn moved the row itself, so a quiescent
# row is no longer fresh, and a running one has no active run below it (a parent runs again only
# once all its children ended).
_LONE = f"(r.tree_root_id IS NULL AND NOT EXISTS (SELECT 1 FROM {_RUN} c WHERE c.tree_root_id = r.id))"
_LONE_CANCEL_SQL = _CANCEL_TEMPLATE.format(lone=_LONE)


def _cancel_statement(
    run_id: uuid.UUID,
    *,
    by: Any,
    source: str,
    reason: str,
    termination_reason: str,
    detail: dict[str, Any] | None = None,
    lone: bool = False,
) -> Transition | None:
    """The cancel fence as one statement (PostgreSQL).

    Returns the ``Transition`` (applied, or why not), or ``None`` when the caller must run
    the read-check-write fence instead (a quiescent row changed while the lock was awaited);
    with ``lone``, also when the run leads or belongs to a tree (nothing written: the caller
    takes the tree's path).
    """
    user, username = actor(by)
    by_id = user.pk if user is not None else None
    step = cancel_payload(
        {
            **cancel_fields(
                None, by=by, source=source, reason=reason, termination_reason=termination_reason, detail=detail
            )
        },
        None,
    )
    for filled_in_by_the_statement in ("requested_at", "boundary_sequence"):
        del step[filled_in_by_the_statement]
    _, rows = prepared.execute(
        _LONE_CANCEL_SQL if lone else _CANCEL_SQL,
        [
            run_id,
            run_id,
            str(termination_reason),
            by_id,
            username,
            str(source),
            reason or "",
            None if detail is None else json.dumps(detail),
            json.dumps(step),
        ],
        fetch=True,
    )
    if not rows:
        return NOT_FOUND
    previous, fresh, changed, provider, alone = rows[0]
    if changed:  # the provider: what the cancel metric is labelled with, without another query
        return Transition(True, RunStatus.CANCELLED, previous, {"provider": provider})
    if (previous in QUIESCENT and not fresh) or (not alone and previous in ACTIVE):
        return None
    return Transition(False, previous, previous)


def cancel_lone(
    run_id: uuid.UUID,
    *,
    by: Any = None,
    source: str,
    reason: str = "",
    termination_reason: str = TerminationReason.CANCELLED,
    detail: dict[str, Any] | None = None,
) -> Transition | None:
    """``cancel`` of a run of no tree, as it was before trees: one statement that pays nothing
    for them (PostgreSQL). ``None``, having written nothing, when the run leads or belongs to a
    tree (or the statement leaves it to the fence, or on SQLite): the caller then cancels it with
    its subtree (``store.trees.cancel_tree``). ``reason`` is checked by the caller."""
    if not prepared.enabled():
        return None
    return _cancel_statement(
        run_id, by=by, source=source, reason=reason, termination_reason=termination_reason, detail=detail, lone=True
    )


def cancel(
    run_id: uuid.UUID,
    *,
    by: Any = None,
    source: str,
    reason: str = "",
    termination_reason: str = TerminationReason.CANCELLED,
    detail: dict[str, Any] | None = None,
) -> Transition:
    """``queued / running / waiting_for_approval → cancelled``; exactly one of two cancels wins.

    ``termination_reason`` says why (a limit's cancel: ``deadline_exceeded``,
    ``budget_exceeded``) and ``detail`` what it measured; both end up in the ``cancelled`` step.
    Clears what could resume the run. When no segment is executing the run (queued or
    waiting), the ``cancelled`` step is appended here, so every cancelled stream ends with one;
    a running segment appends it itself at its next boundary. ``cancel_requested_at`` is
    stamped once the row lock is held, so every step committed before the cancel carries an
    earlier time. On PostgreSQL this is one statement (``store.cancels``). Raises
    ``InvalidArgument`` for a reason that cannot be recorded (``results.reason_problem``).
    """
    reason = checked_reason(reason)
    if prepared.enabled():
        done = _cancel_statement(
            run_id, by=by, source=source, reason=reason, termination_reason=termination_reason, detail=detail
        )
        if done is not None:
            return done
    return _cancel_fence(
        run_id, by=by, source=source, reason=reason, termination_reason=termination_reason, detail=detail
    )


def _cancel_fence(
    run_id: uuid.UUID,
    *,
    by: Any,
    source: str,
    reason: str,
    termination_reason: str,
    detail: dict[str, Any] | None,
) -> Transition:
    """The cancel as a read-check-write fence: lock the row, check it is active, write."""
    with transaction.atomic():
        row = AgentRun.objects.select_for_update().filter(pk=run_id).values("status", "provider").first()
        if row is None:
            return NOT_FOUND
        previous = row["status"]
        if previous in TERMINAL:
            return Transition(False, previous, previous)
        now = timezone.now()  # after the lock: the audit reads in commit order
        quiescent = previous != RunStatus.RUNNING
        # A running run keeps its owner and lease: its segment acknowledges at the next
        # boundary, or the reaper does once that lease expires (the segment died).
        quiescent_fields = {"stopped_at": stop_stamp(now), "lease_expires": None} if quiescent else {}
        AgentRun.objects.filter(pk=run_id, status=previous).update(
            **cancel_fields(
                now, by=by, source=source, reason=reason, termination_reason=termination_reason, detail=detail
            ),
            **quiescent_fields,
        )
        if quiescent:
            append_cancelled(run_id, now)
    return Transition(True, RunStatus.CANCELLED, previous, {"provider": row["provider"]})


def cancel_fields(
    now: datetime | None,
    *,
    by: Any,
    source: str,
    reason: str,
    termination_reason: str = TerminationReason.CANCELLED,
    detail: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """What every cancel writes on a run's row (single and bulk): who, why, when, and nothing
    left that could resume it."""
    user, name = actor(by)
    return {
        "status": RunStatus.CANCELLED,
        "termination_reason": termination_reason,
        "cancel_detail": detail,
        "cancel_requested_at": now,
        "cancelled_by": user,
        "cancelled_by_name": name or "",
        "cancel_source": source,
        "cancel_reason": reason or "",
        "finished_at": stop_stamp(now) if now is not None else None,
        "request_payload": None,
        "suspended_state": None,
    }
