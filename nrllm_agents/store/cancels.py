"""A cancel in one round trip on PostgreSQL: one prepared statement, still a row-lock fence.

The statement's first CTE locks the run's row (``FOR UPDATE``); the next stamps the time once
that lock is held (``clock_timestamp()``, so a step committed while the cancel waited for the
lock never looks as if it came after the cancel); the ``UPDATE`` applies only to an active
row; for a quiescent run (queued or waiting) the ``cancelled`` step is appended in the same
statement. It returns the status the lock found, so the caller builds the same
``Transition`` as the read-check-write fence in ``runs.cancel``, and the run's provider
(``data["provider"]``, for the metrics: no query after the cancel).

One case is left to that fence: a quiescent run whose row changed while the statement waited
for its lock (e.g. a segment requeued it). The statement's snapshot predates that change and
could miss the steps committed just before it, so the ``cancelled`` step's sequence would be
wrong; the statement then writes nothing and reports ``None``, and the caller runs the fence.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from ..domain import StepKind
from ..models import ACTIVE, QUIESCENT, AgentRun, AgentRunEvent, RunStatus
from . import prepared
from .results import NOT_FOUND, Transition, actor

_RUN, _EVENT = AgentRun._meta.db_table, AgentRunEvent._meta.db_table
_ACTIVE = "(" + ", ".join(f"'{s.value}'" for s in sorted(ACTIVE)) + ")"

# Parameters: id, id, reason code, by id, by name, source, reason text, detail (JSON or NULL), by name.
_CANCEL_SQL = f"""
WITH locked AS (
    -- fresh: the locked row is the version this statement's snapshot saw; only a quiescent
    -- run needs it (the CASE skips the second look-up for a running one)
    SELECT r.id, r.status, r.provider,
           CASE WHEN r.status = 'running' THEN true
                ELSE r.xmin = (SELECT s.xmin FROM {_RUN} s WHERE s.id = %s) END AS fresh
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
    WHERE r.id = l.id AND l.status IN {_ACTIVE} AND (l.status = 'running' OR l.fresh)
    RETURNING r.id, l.status AS previous, t.at, r.cancel_source, r.cancel_reason, r.termination_reason,
              r.cancel_detail
), appended AS (
    INSERT INTO {_EVENT} (run_id, sequence, kind, round, duration_ms, payload, created_at)
    SELECT c.id, COALESCE(m.mx + 1, 0), '{StepKind.CANCELLED.value}', 0, NULL,
           jsonb_build_object('status', 'cancelled', 'by', %s::text, 'source', c.cancel_source,
                              'reason', c.cancel_reason,
                              'requested_at', to_char(c.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"'),
                              'boundary_sequence', m.mx, 'termination_reason', c.termination_reason)
           || CASE WHEN c.cancel_detail IS NULL THEN '{{}}'::jsonb
                   ELSE jsonb_build_object('limit', c.cancel_detail) END,
           c.at
    FROM changed c CROSS JOIN LATERAL (SELECT MAX(e.sequence) AS mx FROM {_EVENT} e WHERE e.run_id = c.id) m
    WHERE c.previous <> 'running'
)
SELECT l.status, l.fresh, (SELECT count(*) FROM changed), l.provider FROM locked l
"""


def cancel_one_trip(
    run_id: uuid.UUID,
    *,
    by: Any,
    source: str,
    reason: str,
    termination_reason: str,
    detail: dict[str, Any] | None = None,
) -> Transition | None:
    """The cancel fence as one statement (PostgreSQL).

    Returns the ``Transition`` (applied, or why not), or ``None`` when the caller must run
    the read-check-write fence instead (a quiescent row changed while the lock was awaited).
    """
    user, username = actor(by)
    by_id = user.pk if user is not None else None
    _, rows = prepared.execute(
        _CANCEL_SQL,
        [
            run_id,
            run_id,
            str(termination_reason),
            by_id,
            username,
            str(source),
            reason or "",
            None if detail is None else json.dumps(detail),
            username,
        ],
        fetch=True,
    )
    if not rows:
        return NOT_FOUND
    previous, fresh, changed, provider = rows[0]
    if changed:  # the provider: what the cancel metric is labelled with, without another query
        return Transition(True, RunStatus.CANCELLED, previous, {"provider": provider})
    if previous in QUIESCENT and not fresh:
        return None
    return Transition(False, previous, previous)
