"""The JSON shapes every surface shares: a step, and a run's final summary event."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from ..domain.steps import decimal_text
from ..models import AgentRun, AgentRunEvent, RunStatus
from ..money.pricing import cost_dict


def step_dict(
    *,
    run_id: Any,
    sequence: int,
    kind: str,
    round: int,
    duration_ms: float | None,
    payload: dict[str, Any],
    created_at: datetime,
) -> dict[str, Any]:
    return {
        "run_id": str(run_id),
        "sequence": sequence,
        "kind": kind,
        "round": round,
        "duration_ms": duration_ms,
        "payload": payload,
        "created_at": created_at.isoformat(),
    }


def event_dict(event: AgentRunEvent) -> dict[str, Any]:
    return step_dict(
        run_id=event.run_id,
        sequence=event.sequence,
        kind=event.kind,
        round=event.round,
        duration_ms=event.duration_ms,
        payload=event.payload,
        created_at=event.created_at,
    )


_FINAL_EVENT = {
    RunStatus.COMPLETED: "done",
    RunStatus.CANCELLED: "cancelled",
    RunStatus.WAITING_FOR_APPROVAL: "awaiting_approval",
    RunStatus.FAILED: "failed",
}


def final_event_name(status: str) -> str | None:
    """The stream's closing event for a status, or ``None`` while the run is still moving."""
    return _FINAL_EVENT.get(RunStatus(status))


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def run_status_dict(run: AgentRun) -> dict[str, Any]:
    """The run's status payload: what a final stream event and a summary line carry."""
    pending, doubt = [], None
    if run.status == RunStatus.WAITING_FOR_APPROVAL and run.suspended_state:
        pending = run.suspended_state.get("pending_calls", [])
        doubt = run.suspended_state.get("in_doubt")
    return {
        "run_id": str(run.pk),
        "status": run.status,
        "termination_reason": run.termination_reason or None,
        "iterations": run.iterations,
        "usage": {
            "prompt_tokens": run.prompt_tokens,
            "completion_tokens": run.completion_tokens,
            "total_tokens": run.total_tokens,
        },
        "cost": cost_dict(run),
        "final_text": run.final_text or None,
        "error": f"{run.error_class}: {run.error_message}" if run.error_class else None,
        "pending_approval": pending,
        # the call a lost worker may or may not have made: resolve it (happened, or not), or cancel
        "in_doubt": doubt if isinstance(doubt, dict) else None,
        "created_at": _iso(run.created_at),
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
        # the retention policy purged its content: prompt, texts and steps' content are gone
        "purged_at": _iso(run.purged_at),
        "cancel": {
            "requested_at": _iso(run.cancel_requested_at),
            "by": run.cancelled_by_name or None,
            "source": run.cancel_source or None,
            "reason": run.cancel_reason or None,
            "stopped_at": _iso(run.stopped_at) if run.cancel_requested_at else None,
            "limit": run.cancel_detail or None,
        }
        if run.cancel_requested_at
        else None,
        "limits": {
            "deadline_seconds": run.deadline_seconds,
            "max_total_tokens": run.max_total_tokens,
            "max_cost": amount_text(run.max_cost),
            "deadline_at": _iso(run.deadline_at),
        },
        "connection": run.connection or None,
        "agent": {"name": run.agent_snapshot.get("name"), "version": run.agent_snapshot.get("version")}
        if run.agent_snapshot
        else None,
        "parent": {"run_id": str(run.parent_id), "from_sequence": run.forked_from_sequence} if run.parent_id else None,
        "thread": {
            "thread_id": str(run.thread_id),
            "position": run.thread_position,
            "multitask_strategy": run.multitask_strategy or None,
            "rolled_back": run.rolled_back,
        }
        if run.thread_id
        else None,
    }


def amount_text(amount: Any) -> str | None:
    """A money amount as plain decimal text (``None`` stays ``None``)."""
    return None if amount is None else decimal_text(Decimal(amount).normalize())


def summary_event(run: AgentRun) -> dict[str, Any]:
    """The last line of a ``--json`` stream (and the browser stream's final event payload)."""
    return {"event": final_event_name(run.status) or run.status, **run_status_dict(run)}


def stream_finished(run: AgentRun) -> bool:
    """True when nothing more will be appended to the run's stream for now.

    Completed, failed and waiting runs are done. A cancelled run is done once its stop was
    acknowledged (``stopped_at`` set, which happens in the same transaction that appends the
    ``cancelled`` step); until then a segment is still finishing its step in flight.
    Followers (CLI ``--follow``, the browser stream) poll until this holds.
    """
    if run.status == RunStatus.CANCELLED:
        return run.stopped_at is not None
    return run.status in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.WAITING_FOR_APPROVAL)
