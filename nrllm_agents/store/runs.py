"""Run transitions: begin, claim, suspend, resume, settle, cancel, and the step stream."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from ..domain import Usage
from ..models import ACTIVE, AgentRun, AgentRunEvent, RunStatus
from .journal import append_cancelled, ended_fields, owned, spend_fields, stop_stamp
from .results import NOT_FOUND, InvalidArgument, Transition

logger = logging.getLogger(__name__)


def _active() -> list[str]:
    return [s.value for s in ACTIVE]


def begin(fields: dict[str, Any], *, claimed_by: str = "", lease_expires: datetime | None = None) -> AgentRun:
    """Insert a run that is executing from birth (``— → running``), owned by ``claimed_by``."""
    now = timezone.now()  # one clock reading: created and started at the same moment
    return AgentRun.objects.create(
        status=RunStatus.RUNNING,
        created_at=now,
        started_at=now,
        claimed_by=claimed_by,
        lease_expires=lease_expires,
        **fields,
    )


def create_queued(fields: dict[str, Any], request_payload: dict[str, Any]) -> AgentRun:
    """Insert a queued run holding the payload a worker rehydrates (``— → queued``)."""
    return AgentRun.objects.create(status=RunStatus.QUEUED, request_payload=request_payload, **fields)


def _move(run_id: uuid.UUID, source: str, target: str, *, read: str | None = None, **fields: Any) -> Transition:
    """The read-check-write fence: lock the row, check it is in ``source``, move it to ``target``.

    ``read`` names a column returned in ``data`` as it was before the write.
    """
    with transaction.atomic():
        row = AgentRun.objects.select_for_update().filter(pk=run_id).values("status", *filter(None, [read])).first()
        if row is None:
            return NOT_FOUND
        if row["status"] != source:
            return Transition(False, row["status"], row["status"])
        AgentRun.objects.filter(pk=run_id, status=source).update(status=target, **fields)
    return Transition(True, target, source, {read: row[read]} if read else {})


def claim_for_resume(run_id: uuid.UUID, *, claimed_by: str = "", lease_expires: datetime | None = None) -> Transition:
    """``waiting_for_approval → running``; a second concurrent approve loses."""
    return _move(
        run_id,
        RunStatus.WAITING_FOR_APPROVAL,
        RunStatus.RUNNING,
        read="suspended_state",
        claimed_by=claimed_by,
        lease_expires=lease_expires,
        **_deadline_after_wait(run_id),
    )


def requeue_for_resume(run_id: uuid.UUID, payload: dict[str, Any]) -> Transition:
    """``waiting_for_approval → queued`` with the decision stored for the worker that resumes it."""
    return _move(
        run_id,
        RunStatus.WAITING_FOR_APPROVAL,
        RunStatus.QUEUED,
        request_payload=payload,
        **_deadline_after_wait(run_id),
    )


def _deadline_after_wait(run_id: uuid.UUID) -> dict[str, Any]:
    """The deadline pushed back by the time spent waiting for approval (it does not count).

    The wait began with the run's last recorded step (the model turn that asked for approval);
    written in the same fence that ends the wait. A run without a deadline keeps NULL.
    """
    last = AgentRunEvent.objects.filter(run_id=run_id).order_by("-sequence").values_list("created_at", flat=True)[:1]
    waited = timezone.now() - last[0] if last else None
    return {"deadline_at": F("deadline_at") + waited} if waited is not None and waited.total_seconds() > 0 else {}


def _refused(run_id: uuid.UUID) -> Transition:
    status = probe_status(run_id, fail_soft=False)
    return Transition(False, status, status)


def suspend(
    run_id: uuid.UUID, *, state: dict[str, Any], iterations: int, usage: Usage, owner: str | None = None
) -> Transition:
    """``running → waiting_for_approval`` (by the owning segment), storing the resumable state.
    A call in doubt is in ``state`` (``in_doubt``) from now on: the write fence's stamp goes."""
    n = owned(run_id, owner).update(
        status=RunStatus.WAITING_FOR_APPROVAL,
        suspended_state=state,
        **spend_fields(iterations, usage),
        claimed_by="",
        lease_expires=None,
        pending_effect=None,
    )
    return Transition(True, RunStatus.WAITING_FOR_APPROVAL, RunStatus.RUNNING) if n else _refused(run_id)


def settle(
    run_id: uuid.UUID,
    *,
    status: str,
    reason: str,
    iterations: int | None = None,
    usage: Usage | None = None,
    final_text: str = "",
    error_class: str = "",
    error_message: str = "",
    owner: str | None = None,
) -> Transition:
    """A terminal write (``→ completed / failed``).

    With ``owner`` (a segment settling its own run) the row must be running and claimed by
    it, so a segment that lost its lease settles nothing. Without, any non-terminal row
    (used for runs no segment holds, e.g. a failed enqueue). The spend (``iterations``,
    ``usage``) is written when given, else the row keeps what it recorded so far.
    """
    if status not in (RunStatus.COMPLETED, RunStatus.FAILED):
        raise InvalidArgument(f"a settle moves a run to completed or failed, not {status!r}")
    now = timezone.now()
    rows = owned(run_id, owner) if owner is not None else AgentRun.objects.filter(pk=run_id, status__in=_active())
    n = rows.update(
        **ended_fields(status, reason, now, error_class=error_class, error_message=error_message),
        **spend_fields(iterations, usage),
        final_text=final_text or "",
        pending_effect=None,
    )
    return Transition(True, status, None) if n else _refused(run_id)


def acknowledge_cancel(
    run_id: uuid.UUID,
    *,
    sequence: int,
    round: int,
    iterations: int,
    usage: Usage,
    owner: str | None = None,
    interrupted_sequence: int | None = None,
    stopped_at: datetime | None = None,
) -> Transition:
    """A segment stopped by a cancel: stamp when it stopped and its spend, append ``cancelled``
    at ``sequence`` (the step before it is the boundary).

    ``stopped_at`` is when the work stopped: the end of the step the cancel cut short (or of
    the boundary step that found the cancel), as the segment stamped it when it recorded that
    step; default now (a cancel found before a call started). Never earlier than the cancel
    itself: ``stopped_at`` and ``finished_at`` become the later of the two, so the run's times
    stay in order (``models.TIMES_IN_ORDER``) and the write of the ``cancelled`` step, after
    it, adds nothing to the stop.

    Happens at most once per run (guarded on ``stopped_at IS NULL``): ``applied`` with the
    appended step as ``data["event"]``, or not applied when the acknowledgement was already
    made (or the run is not this segment's). ``interrupted_sequence`` names the step the
    cancel cut short, when it did (the step is marked ``interrupted``).
    """
    now = timezone.now()
    stop = stop_stamp(stopped_at or now, after="finished_at")
    with transaction.atomic():
        rows = AgentRun.objects.filter(pk=run_id, status=RunStatus.CANCELLED, stopped_at__isnull=True)
        if owner is not None:
            rows = rows.filter(claimed_by=owner)  # a segment that lost the run never writes to it
        n = rows.update(
            stopped_at=stop,
            finished_at=stop,
            **spend_fields(iterations, usage),
            claimed_by="",
            pending_effect=None,
        )
        if not n:
            return Transition(False, RunStatus.CANCELLED, RunStatus.CANCELLED)
        event = append_cancelled(run_id, now, sequence=sequence)
        changes: dict[str, Any] = {}
        if round:
            changes["round"] = event.round = round
        if interrupted_sequence is not None:
            event.payload = {**event.payload, "interrupted": True, "interrupted_sequence": interrupted_sequence}
            changes["payload"] = event.payload
        if changes:
            AgentRunEvent.objects.filter(pk=event.pk).update(**changes)
    return Transition(True, RunStatus.CANCELLED, RunStatus.CANCELLED, {"event": event})


def keep_trace_context(run_id: uuid.UUID, carrier: dict[str, str]) -> bool:
    """Give a run that holds no trace context yet ``carrier`` (its first traced segment's), so
    that its later segments join the same trace. Moves no status; returns whether it was kept
    (``False``: the run already had one, or is gone)."""
    return bool(AgentRun.objects.filter(pk=run_id, trace_context__isnull=True).update(trace_context=carrier))


def probe_status(run_id: uuid.UUID, *, fail_soft: bool = True) -> str | None:
    """Re-read a run's status by primary key.

    With ``fail_soft`` an error reading the row is logged and answered with ``None``
    ("unknown"), which callers must treat as "not cancelled".
    """
    try:
        # No .first(): its ORDER BY is wasted work on the hot path.
        return next(iter(AgentRun.objects.filter(pk=run_id).values_list("status", flat=True).order_by()[:1]), None)
    except Exception as exc:
        if not fail_soft:
            raise
        logger.warning("status probe for run %s failed (%s); treating as not cancelled", run_id, type(exc).__name__)
        return None


def events(run_id: uuid.UUID, *, after: int = -1, limit: int | None = None) -> Iterable[AgentRunEvent]:
    """The stream of a run from ``after`` (exclusive), in sequence order."""
    qs = AgentRunEvent.objects.filter(run_id=run_id, sequence__gt=after).order_by("sequence")
    return qs[:limit] if limit else qs
