"""``AgentRuntime``: the one entry point every surface calls.

Segments (``run``, ``approve``, ``run_queued``) share one trace hook and one ladder:
a cancellation is caught before any generic handler, no settle is attempted (the cancel
already won the row), the stop is acknowledged, and the outcome is ``cancelled``.
"""

from __future__ import annotations

import enum
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from . import dispatch, registry, store
from .conf import app_settings
from .domain import (LoopOutcome, LoopResult, LoopState, RunCancellationRequested, ToolLoop, Usage)
from .models import AgentRun, AgentRunEvent, RunStatus, TerminationReason
from .requests import InvalidRequest, RunRequest
from .segment import SegmentTrace, StepObserver, identity

logger = logging.getLogger(__name__)


class Outcome(enum.StrEnum):
    """What one segment call ended with (never stored; the status is)."""

    COMPLETED = "completed"  # settled completed
    AWAITING_APPROVAL = "awaiting_approval"  # suspended, waiting for a human decision
    SUSPEND_FAILED = "suspend_failed"  # wanted to suspend but the row was no longer running
    FAILED = "failed"  # settled failed
    CANCELLED = "cancelled"  # a cancel won the row; the segment stopped at a boundary
    QUEUED = "queued"  # handed to a worker (approve with queued=True)


class CancelOutcome(enum.StrEnum):
    """What a cancel request did."""

    CANCELLED = "cancelled"  # this call cancelled the run
    ALREADY_CANCELLED = "already_cancelled"  # it was cancelled before; nothing changed
    ALREADY_FINISHED = "already_finished"  # it had completed or failed; nothing changed
    NOT_FOUND = "not_found"  # no such run (or not visible to the caller)


class RunNotFound(LookupError):
    """No run has this id."""

    def __init__(self, run_id: Any) -> None:
        super().__init__(f"run {run_id} not found")
        self.run_id = run_id


class ApprovalNotPending(RuntimeError):
    """The run is not waiting for approval, so it cannot be approved or denied."""

    def __init__(self, run_id: Any, status: str) -> None:
        super().__init__(f"run {run_id} is {status}, not waiting for approval")
        self.run_id = run_id
        self.status = status


@dataclass(frozen=True)
class RunResult:
    """What a segment call returns."""

    run_id: uuid.UUID
    outcome: Outcome
    status: str
    termination_reason: str
    steps: int  # steps this segment recorded
    final_text: str | None = None
    usage: Usage = Usage()
    iterations: int = 0
    error: str = ""
    pending_calls: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class CancelResult:
    """What ``AgentRuntime.cancel`` did; ``previous_status`` is what the cancel found."""

    run_id: Any
    outcome: CancelOutcome
    status: str | None
    previous_status: str | None

    @property
    def was_executing(self) -> bool:
        """A segment was executing it: it stops at its next boundary."""
        return self.outcome == CancelOutcome.CANCELLED and self.previous_status == RunStatus.RUNNING


_SETTLE = {
    LoopOutcome.COMPLETED: (RunStatus.COMPLETED, TerminationReason.COMPLETED),
    LoopOutcome.APPROVAL_DENIED: (RunStatus.COMPLETED, TerminationReason.APPROVAL_DENIED),
    LoopOutcome.MAX_ITERATIONS: (RunStatus.FAILED, TerminationReason.MAX_ITERATIONS),
    LoopOutcome.PROVIDER_FAILED: (RunStatus.FAILED, TerminationReason.PROVIDER_FAILED),
    LoopOutcome.TOOL_FAILED: (RunStatus.FAILED, TerminationReason.TOOL_FAILED),
}


class InvalidRunId(ValueError):
    """The text is not a run id (a UUID)."""

    def __init__(self, value: Any) -> None:
        super().__init__(f"not a run id: {str(value)[:80]!r}")


def parse_run_id(value: uuid.UUID | str) -> uuid.UUID:
    """A run id from a UUID or its text; raises ``InvalidRunId``."""
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value).strip())
    except (ValueError, AttributeError, TypeError):
        raise InvalidRunId(value) from None


def _safe_message(exc: BaseException | None) -> str:
    return str(exc)[:2000] if exc is not None else ""


class AgentRuntime:
    """Starts, resumes, queues and cancels runs. Stateless; cheap to construct."""

    # --- segments -------------------------------------------------------------------------
    def run(self, request: RunRequest | dict[str, Any], *, owner: Any = None,
            on_step: StepObserver | None = None) -> RunResult:
        """Execute a new run in this process, streaming steps to ``on_step``.

        Raises ``InvalidRequest`` for a bad request; never raises for a run outcome.
        """
        request = request if isinstance(request, RunRequest) else RunRequest.from_mapping(request)
        run = store.begin({**request.row_fields(), "owner": owner}, claimed_by=identity("interactive"))
        trace = SegmentTrace(run.pk, next_sequence=0, on_step=on_step)
        return self._execute(run.pk, request, trace, lambda loop: loop.start(request.prompt, system=request.system))

    def approve(self, run_id: uuid.UUID | str, decision: bool, *, by: Any = None,
                on_step: StepObserver | None = None, queued: bool = False) -> RunResult:
        """Resume a waiting run with a human decision on its pending calls.

        Here by default; with ``queued=True`` the decision is stored and a worker resumes
        the run (outcome ``queued``). Raises ``RunNotFound``, or ``ApprovalNotPending`` when
        the run is not waiting (already resumed by someone else, cancelled, finished).
        """
        run_id = parse_run_id(run_id)
        who = by.get_username() if by is not None and hasattr(by, "get_username") else by
        if queued:
            claim = store.requeue_for_resume(run_id, {"resume": {"approved": bool(decision), "by": who}})
        else:
            claim = store.claim_for_resume(run_id, claimed_by=identity("resume"))
        if not claim.found:
            raise RunNotFound(run_id)
        if not claim.applied:
            raise ApprovalNotPending(run_id, claim.status or "")
        if queued:
            self._dispatch(run_id)
            run = AgentRun.objects.get(pk=run_id)
            return RunResult(run_id=run_id, outcome=Outcome.QUEUED, status=run.status,
                             termination_reason=run.termination_reason, steps=0,
                             usage=Usage(run.prompt_tokens, run.completion_tokens), iterations=run.iterations)
        run = AgentRun.objects.get(pk=run_id)
        return self._resume(run, LoopState.from_dict(claim.data["suspended_state"]), decision, who, on_step)

    def enqueue(self, request: RunRequest | dict[str, Any], *, owner: Any = None) -> uuid.UUID:
        """Store a ``queued`` run and wake a worker for it once the transaction commits.

        Fail-closed: if the queue refuses the job, the run is settled ``failed``
        (``enqueue_failed``) and ``EnqueueError`` is raised (logged instead when called inside
        ``atomic()``: the dispatch then runs after COMMIT); no queued row is left that no job
        will ever wake. Raises ``InvalidRequest`` for a bad request.
        """
        request = request if isinstance(request, RunRequest) else RunRequest.from_mapping(request)
        run = store.create_queued({**request.row_fields(), "owner": owner}, request.as_dict())
        # Outside atomic() the hook runs now and EnqueueError reaches the caller. Inside, it runs
        # after COMMIT, where raising would drop the other hooks of that commit (other runs'
        # dispatches): there the failed run is settled and the error logged instead.
        transaction.on_commit(lambda: self._dispatch(run.pk), robust=transaction.get_connection().in_atomic_block)
        return run.pk

    def _dispatch(self, run_id: uuid.UUID) -> None:
        try:
            dispatch.dispatch(run_id)
        except Exception as exc:
            cause = f"{type(exc).__name__}: {_safe_message(exc)[:300]}"
            logger.error("run %s: enqueue failed (%s)", run_id, type(exc).__name__)
            store.settle(run_id, status=RunStatus.FAILED, reason=TerminationReason.ENQUEUE_FAILED,
                         error_class=type(exc).__name__, error_message=cause)
            raise dispatch.EnqueueError(run_id, cause) from None

    def run_queued(self, run_id: uuid.UUID | str, on_step: StepObserver | None = None) -> RunResult | None:
        """Claim a queued run (``queued → running``) and execute it here.

        Returns ``None`` and does nothing when the claim loses: the run was cancelled
        before a worker got to it, or another worker (or a second delivery of the same
        job) claimed it first. A stored request that cannot be rehydrated settles the run
        ``failed`` rather than stranding it.
        """
        run_id = parse_run_id(run_id)
        lease = timezone.now() + timedelta(seconds=int(app_settings.LEASE_SECONDS))
        claim = store.claim_queued(run_id, claimed_by=identity("worker"), lease_expires=lease)
        if not claim.applied:
            return None
        payload = claim.data.get("request_payload") or {}
        run = AgentRun.objects.get(pk=run_id)
        if "resume" in payload:
            try:
                state = LoopState.from_dict(run.suspended_state or {})
            except (KeyError, TypeError, ValueError) as exc:  # settle, never strand the claimed run
                trace = SegmentTrace(run_id, next_sequence=store.next_sequence(run_id), on_step=on_step)
                return self._settle_unrunnable(run_id, trace, exc)
            return self._resume(run, state, payload["resume"].get("approved", False),
                                payload["resume"].get("by"), on_step)
        trace = SegmentTrace(run_id, next_sequence=store.next_sequence(run_id), on_step=on_step)
        try:
            request = RunRequest.from_mapping(payload)
        except InvalidRequest as exc:
            return self._settle_unrunnable(run_id, trace, exc)
        return self._execute(run_id, request, trace,
                             lambda loop: loop.start(request.prompt, system=request.system))

    def _resume(self, run: AgentRun, state: LoopState, decision: bool, by: str | None,
                on_step: StepObserver | None) -> RunResult:
        trace = SegmentTrace(run.pk, next_sequence=store.next_sequence(run.pk), on_step=on_step,
                             base_usage=state.usage, base_iterations=state.iterations)
        try:
            request = RunRequest.from_row(run)
        except InvalidRequest as exc:
            return self._settle_unrunnable(run.pk, trace, exc)
        return self._execute(run.pk, request, trace,
                             lambda loop: loop.resume(state, approved=bool(decision), decision={"by": by}))

    def _execute(self, run_id: uuid.UUID, request: RunRequest, trace: SegmentTrace,
                 drive: Callable[[ToolLoop], LoopResult]) -> RunResult:
        """The ladder shared by every segment."""
        try:
            loop = ToolLoop(registry.build_provider(request, run_id), registry.build_tools(request.tools, run_id),
                            trace=trace, max_iterations=request.max_iterations, on_deny=request.on_deny)
            result = drive(loop)
        except RunCancellationRequested:
            # Before the generic handler: the cancel already won the row; never settle.
            return self._cancelled(run_id, trace)
        except Exception as exc:
            logger.exception("run %s: unexpected error in the runtime", run_id)
            return self._close(run_id, trace, store.settle(
                run_id, status=RunStatus.FAILED, reason=TerminationReason.INTERNAL_ERROR,
                iterations=trace.iterations, usage=trace.usage,
                error_class=type(exc).__name__, error_message=_safe_message(exc)), Outcome.FAILED)
        state = result.state
        if result.outcome == LoopOutcome.AWAITING_APPROVAL:
            fence = store.suspend(run_id, state=state.as_dict(), iterations=state.iterations, usage=state.usage)
            return self._close(run_id, trace, fence, Outcome.AWAITING_APPROVAL, result,
                               refused=Outcome.SUSPEND_FAILED)
        status, reason = _SETTLE[result.outcome]
        fence = store.settle(run_id, status=status, reason=reason, iterations=state.iterations, usage=state.usage,
                             final_text=result.final_text or "",
                             error_class=type(result.error).__name__ if result.error else "",
                             error_message=_safe_message(result.error))
        return self._close(run_id, trace, fence, Outcome(status.value), result)

    def _close(self, run_id: uuid.UUID, trace: SegmentTrace, fence: store.Transition, outcome: Outcome,
               result: LoopResult | None = None, refused: Outcome = Outcome.FAILED) -> RunResult:
        """Map a settle/suspend fence to the segment's result; a refused one reports the truth."""
        if not fence.applied:
            if fence.status == RunStatus.CANCELLED:
                return self._cancelled(run_id, trace)
            logger.warning("run %s: %s refused, row is %s", run_id, outcome, fence.status)
            outcome = refused
        run = AgentRun.objects.get(pk=run_id)
        return RunResult(
            run_id=run_id, outcome=outcome, status=run.status, termination_reason=run.termination_reason,
            steps=trace.recorded, final_text=run.final_text or (result.final_text if result else None),
            usage=Usage(run.prompt_tokens, run.completion_tokens), iterations=run.iterations,
            error=f"{run.error_class}: {run.error_message}" if run.error_class else "",
            pending_calls=(run.suspended_state or {}).get("pending_calls", []),
        )

    def _cancelled(self, run_id: uuid.UUID, trace: SegmentTrace) -> RunResult:
        trace.acknowledge_cancel()
        run = AgentRun.objects.get(pk=run_id)
        return RunResult(run_id=run_id, outcome=Outcome.CANCELLED, status=run.status,
                         termination_reason=run.termination_reason, steps=trace.recorded,
                         usage=Usage(run.prompt_tokens, run.completion_tokens), iterations=run.iterations)

    def _settle_unrunnable(self, run_id: uuid.UUID, trace: SegmentTrace, exc: Exception) -> RunResult:
        fence = store.settle(run_id, status=RunStatus.FAILED, reason=TerminationReason.INVALID_REQUEST,
                             iterations=trace.iterations, usage=trace.usage,
                             error_class=type(exc).__name__, error_message=_safe_message(exc))
        return self._close(run_id, trace, fence, Outcome.FAILED)

    # --- control and reads ---------------------------------------------------------------
    def cancel(self, run_id: uuid.UUID | str, *, by: Any = None, source: str, reason: str = "") -> CancelResult:
        """Cancel a run; terminal is terminal. Exactly one of two concurrent cancels wins."""
        run_id = parse_run_id(run_id)
        fence = store.cancel(run_id, by=by, source=source, reason=reason)
        if not fence.found:
            outcome = CancelOutcome.NOT_FOUND
        elif fence.applied:
            outcome = CancelOutcome.CANCELLED
        elif fence.status == RunStatus.CANCELLED:
            outcome = CancelOutcome.ALREADY_CANCELLED
        else:
            outcome = CancelOutcome.ALREADY_FINISHED
        return CancelResult(run_id, outcome, fence.status, fence.previous)

    def cancel_many(self, selection: Any, *, by: Any = None, source: str, reason: str = "",
                    dry_run: bool = False) -> store.BulkCancel:
        """Cancel every active run of a queryset in a constant number of statements."""
        return store.cancel_many(selection, by=by, source=source, reason=reason, dry_run=dry_run)

    def events(self, run_id: uuid.UUID | str, after: int = -1, limit: int | None = None) -> list[AgentRunEvent]:
        """The recorded steps after sequence ``after``, in order."""
        run_id = parse_run_id(run_id)
        return list(store.events(run_id, after=after, limit=limit))

    def status(self, run_id: uuid.UUID | str) -> AgentRun:
        """A fresh snapshot of the run row; raises ``RunNotFound``."""
        run_id = parse_run_id(run_id)
        run = AgentRun.objects.select_related("cancelled_by", "owner").filter(pk=run_id).first()
        if run is None:
            raise RunNotFound(run_id)
        return run
