"""The rows a transition reads and writes besides the status: who may write, and the stream.

Shared by the fences of ``runs``, ``leases`` and ``bulk``: the guard of an owned write, the
append of a step, the ``cancelled`` step every cancelled stream ends with, and the one query
that finds where a run's stream goes on.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from django.db.models import DateTimeField, F, Max, Value
from django.db.models.functions import Coalesce, Greatest

from ..domain import Step, StepKind, Usage
from ..models import AgentRun, AgentRunEvent, RunStatus


def owned(run_id: uuid.UUID, owner: str | None) -> Any:
    """Rows this segment may write: running and, when ``owner`` is given, claimed by it."""
    qs = AgentRun.objects.filter(pk=run_id, status=RunStatus.RUNNING)
    return qs.filter(claimed_by=owner) if owner is not None else qs


def spend_fields(iterations: int | None, usage: Usage | None) -> dict[str, Any]:
    """The row's spend columns for what a segment measured (only those given; the cost only
    once a call was priced)."""
    fields: dict[str, Any] = {} if iterations is None else {"iterations": iterations}
    if usage is not None:
        fields.update(prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens)
        if usage.cost is not None:
            fields.update(cost=usage.cost, cost_estimated=usage.cost_estimated)
    return fields


def started_stamp(now: datetime) -> Greatest:
    """``started_at`` for a segment starting at ``now``: never before the row's ``created_at``
    (the row may have been inserted by a host whose clock runs ahead: the times stay in order,
    ``models.TIMES_IN_ORDER``)."""
    return Greatest(Value(now, output_field=DateTimeField()), F("created_at"))


def stop_stamp(now: datetime, *, after: str = "started_at") -> Greatest:
    """A stop time (``stopped_at``, ``finished_at``) for ``now``: never before the time named by
    ``after`` (default: the run's start, or its creation when it never started). An
    acknowledgement passes ``after="finished_at"``: the cancel already stamped that one."""
    later = [F(after)] + ([F("started_at")] if after != "started_at" else []) + [F("created_at")]
    return Greatest(Value(now, output_field=DateTimeField()), Coalesce(*later))


RECOVER = {"recover": True}  # request_payload of a run handed back to the queue mid-way


def requeued_fields(*, count_attempt: bool) -> dict[str, Any]:
    """What every hand-back to the queue writes (a segment's, the reaper's): no owner, no
    lease, and a payload that says "continue from the recorded stream"."""
    return {
        "status": RunStatus.QUEUED,
        "claimed_by": "",
        "lease_expires": None,
        "request_payload": RECOVER,
        "attempts": F("attempts") + (1 if count_attempt else 0),
    }


def ended_fields(
    status: str, reason: str, now: datetime, *, error_class: str = "", error_message: str = ""
) -> dict[str, Any]:
    """What every ``→ completed / failed`` write sets (a segment's settle, the reaper's dead
    letter): why and when, and nothing left that could resume the run."""
    return {
        "status": status,
        "termination_reason": reason,
        "finished_at": stop_stamp(now),
        "stopped_at": stop_stamp(now),
        "error_class": error_class,
        "error_message": error_message[:2000],
        "request_payload": None,
        "suspended_state": None,
        "lease_expires": None,
    }


MAX_SEQUENCE = 2**31 - 1
"""The largest sequence the column holds (``AgentRunEvent.sequence``, an ``integer`` on PostgreSQL):
every surface that takes a sequence bounds it with this."""


def last_sequence(run_id: uuid.UUID) -> int | None:
    """The sequence of a run's last recorded step; ``None`` before its first."""
    last: int | None = AgentRunEvent.objects.filter(run_id=run_id).aggregate(m=Max("sequence"))["m"]
    return last


def next_sequence(run_id: uuid.UUID) -> int:
    """The sequence the next step of a run will take."""
    last = last_sequence(run_id)
    return 0 if last is None else last + 1


def step_columns(run_id: uuid.UUID, sequence: int, step: Step, created_at: datetime) -> dict[str, Any]:
    """The columns of the row that records ``step`` at ``sequence``: the one mapping of a step to
    its row, for the append and for what a segment's observer is shown before it
    (``presenters.step_dict`` takes these as they are)."""
    return {
        "run_id": run_id,
        "sequence": sequence,
        "kind": step.kind.value,
        "round": step.round,
        "duration_ms": step.duration_ms,
        "payload": step.payload,
        "created_at": created_at,
    }


def append_event(run_id: uuid.UUID, sequence: int, step: Step, created_at: datetime) -> None:
    """Record one step (append-only; ``(run, sequence)`` is unique)."""
    AgentRunEvent.objects.create(**step_columns(run_id, sequence, step, created_at))


def _iso(at: datetime | None) -> str | None:
    return at.astimezone(UTC).isoformat(timespec="microseconds") if at is not None else None


def cancel_payload(run: dict[str, Any], boundary: int | None) -> dict[str, Any]:
    """The ``cancelled`` step's payload, from the row's ``CANCEL_FIELDS``."""
    payload = {
        "status": RunStatus.CANCELLED.value,
        "by": run["cancelled_by_name"] or None,
        "source": run["cancel_source"],
        "reason": run["cancel_reason"],
        # always with microseconds, as the one-statement cancel writes it (to_char's .US)
        "requested_at": _iso(run["cancel_requested_at"]),
        "boundary_sequence": boundary,
        "termination_reason": run["termination_reason"],
    }
    detail = run["cancel_detail"]
    if detail and isinstance(detail, dict) and "inherited" in detail:
        payload["inherited"] = detail["inherited"]  # the cancel of an ancestor: which run, who, where, why
    elif detail:
        payload["limit"] = detail  # which limit stopped the run, and what was measured
    return payload


CANCEL_FIELDS = (
    "cancelled_by_name",
    "cancel_source",
    "cancel_reason",
    "cancel_requested_at",
    "termination_reason",
    "cancel_detail",
)


def append_cancelled(run_id: uuid.UUID, now: datetime, *, sequence: int | None = None) -> AgentRunEvent:
    """Append the ``cancelled`` step at ``sequence`` (default: after the last step), naming
    the step before it as the boundary."""
    if sequence is None:
        sequence = next_sequence(run_id)
    run = AgentRun.objects.filter(pk=run_id).values(*CANCEL_FIELDS).get()
    event = cancelled_event(run_id, run, sequence - 1 if sequence else None, now)
    event.save(force_insert=True)
    return event


def append_cancelled_to(runs: Any, now: datetime) -> int:
    """Append the ``cancelled`` step to every run of ``runs`` (a queryset of just-cancelled
    runs), each after its own last step: one read and one insert whatever their number (a tree's
    quiescent runs, a bulk cancel off PostgreSQL). Returns how many were appended."""
    rows = runs.order_by().annotate(boundary=Max("events__sequence")).values("pk", "boundary", *CANCEL_FIELDS)
    events = [cancelled_event(r["pk"], r, r["boundary"], now) for r in rows]
    AgentRunEvent.objects.bulk_create(events)
    return len(events)


def cancelled_event(run_id: uuid.UUID, run: dict[str, Any], boundary: int | None, now: datetime) -> AgentRunEvent:
    """The (unsaved) ``cancelled`` step of a run whose ``CANCEL_FIELDS`` are ``run``, right after
    the step ``boundary`` (``None``: the run recorded none)."""
    return AgentRunEvent(
        run_id=run_id,
        sequence=0 if boundary is None else boundary + 1,
        kind=StepKind.CANCELLED,
        round=0,
        payload=cancel_payload(run, boundary),
        created_at=now,
    )
