"""The claim of a queued run (``queued → running``; exactly one concurrent claimer wins), both
of its paths side by side: on PostgreSQL one round trip, one prepared statement that is still a
row-lock fence (``_claim_statement``); elsewhere, and in the one case the statement leaves to
it, the read-check-write fence (``_claim_fence``). A test runs both and compares the rows.

The statement locks the row (``FOR UPDATE``), moves it only if it is queued, and returns in
the same trip what the work horse needs next: the stored request and the sequence its first
step takes. Like ``store.cancels``, it refuses to decide when the row changed while it waited
for the lock (its snapshot, which the sequence is read from, predates that change); the
caller then runs the read-check-write fence.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from ..models import AgentRun, AgentRunEvent, RunStatus
from . import prepared
from .journal import started_stamp
from .results import NOT_FOUND, Transition

_RUN, _EVENT = AgentRun._meta.db_table, AgentRunEvent._meta.db_table

# Parameters: id, id, started_at, claimed_by, lease_expires, id.
_CLAIM_SQL = f"""
WITH locked AS (
    SELECT r.id, r.status, r.xmin = (SELECT s.xmin FROM {_RUN} s WHERE s.id = %s) AS fresh
    FROM {_RUN} r WHERE r.id = %s FOR UPDATE OF r
), changed AS (
    UPDATE {_RUN} r SET status = 'running', started_at = GREATEST(%s, r.created_at), claimed_by = %s, lease_expires = %s
    FROM locked l WHERE r.id = l.id AND l.status = 'queued' AND l.fresh
    RETURNING r.request_payload
)
SELECT l.status, l.fresh, (SELECT count(*) FROM changed), (SELECT request_payload FROM changed),
       (SELECT MAX(e.sequence) FROM {_EVENT} e WHERE e.run_id = %s)
FROM locked l
"""


def _claim_statement(
    run_id: uuid.UUID, *, started_at: datetime, claimed_by: str, lease_expires: datetime | None
) -> Transition | None:
    """``queued → running`` as one statement (PostgreSQL).

    On success ``data`` holds ``request_payload`` and ``next_sequence``. ``None``: the row
    changed while the lock was awaited; run the fence instead.
    """
    _, rows = prepared.execute(_CLAIM_SQL, [run_id, run_id, started_at, claimed_by, lease_expires, run_id], fetch=True)
    if not rows:
        return NOT_FOUND
    status, fresh, changed, payload, last = rows[0]
    if changed:
        if isinstance(payload, str):  # Django's connections load jsonb as text
            payload = json.loads(payload)
        data: dict[str, Any] = {"request_payload": payload, "next_sequence": 0 if last is None else last + 1}
        return Transition(True, RunStatus.RUNNING, RunStatus.QUEUED, data)
    if status == RunStatus.QUEUED and not fresh:
        return None
    return Transition(False, status, status)


def claim_queued(run_id: uuid.UUID, *, claimed_by: str, lease_expires: datetime | None = None) -> Transition:
    """``queued → running``; exactly one concurrent claimer wins.

    ``data`` holds the stored ``request_payload`` and, on PostgreSQL (one statement), the
    ``next_sequence`` of the run's stream.
    """
    if prepared.enabled():
        done = _claim_statement(run_id, started_at=timezone.now(), claimed_by=claimed_by, lease_expires=lease_expires)
    else:
        done = None
    if done is None:
        done = _claim_fence(run_id, claimed_by=claimed_by, lease_expires=lease_expires)
    if not done.applied and done.status == RunStatus.RUNNING:
        return _already_ours(run_id, claimed_by) or done
    return done


def _already_ours(run_id: uuid.UUID, claimed_by: str) -> Transition | None:
    """The claim, when ``claimed_by`` itself holds the row: a claim tried again on a fresh
    connection after the one it used died between the commit and its reply (the first try
    won). Segment identities are unique, so no other claimer can match."""
    row = AgentRun.objects.filter(pk=run_id, status=RunStatus.RUNNING, claimed_by=claimed_by).values("request_payload")
    found = row.first()
    if found is None:
        return None
    return Transition(True, RunStatus.RUNNING, RunStatus.QUEUED, {"request_payload": found["request_payload"]})


def _claim_fence(run_id: uuid.UUID, *, claimed_by: str, lease_expires: datetime | None) -> Transition:
    """The claim as a read-check-write fence: lock the row, check it is queued, write."""
    with transaction.atomic():
        row = AgentRun.objects.select_for_update().filter(pk=run_id).values("status", "request_payload").first()
        if row is None:
            return NOT_FOUND
        if row["status"] != RunStatus.QUEUED:
            return Transition(False, row["status"], row["status"])
        AgentRun.objects.filter(pk=run_id, status=RunStatus.QUEUED).update(
            status=RunStatus.RUNNING,
            started_at=started_stamp(timezone.now()),
            claimed_by=claimed_by,
            lease_expires=lease_expires,
        )
    return Transition(True, RunStatus.RUNNING, RunStatus.QUEUED, {"request_payload": row["request_payload"]})
