"""``AgentRuntime``: the one entry point every surface calls.

Segments (``run``, ``approve``, ``run_queued``) share one trace hook and one ladder:
a cancellation is caught before any generic handler, no settle is attempted (the cancel
already won the row), the stop is acknowledged, and the outcome is ``cancelled``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from django.db import DatabaseError, transaction
from django.utils import timezone

from .. import store
from ..domain import (
    LoopOutcome,
    LoopResult,
    LoopState,
    ProviderError,
    RunCancellationRequested,
    RunLeaseLost,
    SegmentInterrupted,
    Step,
    ToolLoop,
    Usage,
    rebuild_state,
)
from ..domain.sanitize import clean_text
from ..executors import dispatch
from ..live.interrupts import watcher
from ..models import AgentRun, AgentRunEvent, RunStatus, TerminationReason
from ..observability import hooks as observe
from ..setup import registry
from ..store.retries import RetryPolicy
from ..vocabulary import pricing
from ..vocabulary.outcomes import (
    ApprovalNotPending,
    CancelOutcome,
    CancelResult,
    InvalidRunId,
    Outcome,
    RunNotFound,
    RunResult,
    parse_run_id,
)
from ..vocabulary.presenters import event_dict
from ..vocabulary.run_request import InvalidRequest, RunRequest
from . import budgets as limits
from . import forks, threads
from .segment import DeltaObserver, SegmentTrace, StepObserver, identity

__all__ = [
    "AgentRuntime",
    "ApprovalNotPending",
    "CancelOutcome",
    "CancelResult",
    "InvalidRunId",
    "Outcome",
    "RunNotFound",
    "RunResult",
    "parse_run_id",
]

logger = logging.getLogger(__name__)


_SETTLE = {
    LoopOutcome.COMPLETED: (RunStatus.COMPLETED, TerminationReason.COMPLETED),
    LoopOutcome.APPROVAL_DENIED: (RunStatus.COMPLETED, TerminationReason.APPROVAL_DENIED),
    LoopOutcome.MAX_ITERATIONS: (RunStatus.FAILED, TerminationReason.MAX_ITERATIONS),
    LoopOutcome.PROVIDER_FAILED: (RunStatus.FAILED, TerminationReason.PROVIDER_FAILED),
    LoopOutcome.TOOL_FAILED: (RunStatus.FAILED, TerminationReason.TOOL_FAILED),
}


def _safe_message(exc: BaseException | None) -> str:
    """What the row keeps of an error: never a piece of SQL. The database's own text carries
    the statement (``LINE 1: ...``); only its one-line primary message is kept."""
    if exc is None:
        return ""
    if isinstance(exc, DatabaseError):
        diag = getattr(exc.__cause__, "diag", None)
        primary = getattr(diag, "message_primary", None) or ""
        said = f": {clean_text(primary)[:200]}" if primary else ""
        return f"the database refused a write of this run ({type(exc).__name__}{said})"
    return clean_text(str(exc))[:2000]


def _result(
    run_id: uuid.UUID,
    outcome: Outcome,
    trace: SegmentTrace | None = None,
    *,
    steps: int = 0,
    final_text: str | None = None,
    run: AgentRun | None = None,
) -> RunResult:
    """The one builder of what a runtime call returns: the row as it is now (read once, unless
    the caller just read it) and what this segment recorded. The spend is the row's, which
    every fence that ends a segment writes; a segment that lost the run reports its own (the
    row is not its any more)."""
    if run is None:
        run = AgentRun.objects.filter(pk=run_id).first()
    steps = trace.recorded if trace is not None else steps
    if run is None:  # deleted meanwhile: only what this segment knows
        spent = (trace.usage, trace.iterations) if trace is not None else (Usage(), 0)
        return RunResult(run_id, outcome, "", "", steps, final_text, spent[0], spent[1])
    usage, iterations = Usage(run.prompt_tokens, run.completion_tokens), run.iterations
    if outcome == Outcome.LEASE_LOST and trace is not None:
        usage, iterations = trace.usage, trace.iterations
    return RunResult(
        run_id=run_id,
        outcome=outcome,
        status=run.status,
        termination_reason=run.termination_reason,
        steps=steps,
        final_text=run.final_text or final_text,
        usage=usage,
        iterations=iterations,
        error=f"{run.error_class}: {run.error_message}" if run.error_class else "",
        pending_calls=(run.suspended_state or {}).get("pending_calls", []),
    )


def _opened(trace: SegmentTrace, step: Step) -> Callable[[ToolLoop], LoopResult]:
    """A drive that records ``step`` (a fork's or a thread run's first: it holds the transcript)
    like any step, then continues from the transcript it holds."""

    def drive(loop: ToolLoop) -> LoopResult:
        trace(step)  # recorded like any step: observed, and a boundary
        return loop.proceed(rebuild_state([{"kind": step.kind.value, "round": step.round, "payload": step.payload}]))

    return drive


class AgentRuntime:
    """Starts, resumes, queues, recovers and cancels runs. Stateless; cheap to construct."""

    # --- segments -------------------------------------------------------------------------
    def run(
        self,
        request: RunRequest | dict[str, Any],
        *,
        owner: Any = None,
        on_step: StepObserver | None = None,
        on_delta: DeltaObserver | None = None,
    ) -> RunResult:
        """Execute a new run in this process, streaming steps to ``on_step`` and the model's
        text, as it is written, to ``on_delta``.

        Raises ``InvalidRequest`` for a bad request; never raises for a run outcome.
        """
        request = request if isinstance(request, RunRequest) else RunRequest.from_mapping(request)
        segment = identity("interactive")
        run = store.begin(
            {**request.row_fields(), "owner": owner}, claimed_by=segment, lease_expires=store.lease_until()
        )
        observe.started(run, "interactive")
        trace = SegmentTrace(run.pk, owner=segment, next_sequence=0, on_step=on_step, on_delta=on_delta)
        return self._execute(run.pk, request, trace, lambda loop: loop.start(request.prompt, system=request.system))

    def approve(
        self,
        run_id: uuid.UUID | str,
        decision: bool,
        *,
        by: Any = None,
        on_step: StepObserver | None = None,
        queued: bool = False,
        on_delta: DeltaObserver | None = None,
    ) -> RunResult:
        """Resume a waiting run with a human decision on its pending calls.

        Here by default; with ``queued=True`` the decision is stored and a worker resumes
        the run (outcome ``queued``). Raises ``RunNotFound``, or ``ApprovalNotPending`` when
        the run is not waiting (already resumed by someone else, cancelled, finished).
        """
        run_id = parse_run_id(run_id)
        who = by.get_username() if by is not None and hasattr(by, "get_username") else by
        segment = identity("resume")
        if queued:
            claim = store.requeue_for_resume(run_id, {"resume": {"approved": bool(decision), "by": who}})
        else:
            claim = store.claim_for_resume(run_id, claimed_by=segment, lease_expires=store.lease_until())
        if not claim.found:
            raise RunNotFound(run_id)
        if not claim.applied:
            raise ApprovalNotPending(run_id, claim.status or "")
        if queued:
            return _result(run_id, Outcome.QUEUED if self._dispatch(run_id) else Outcome.WAITING_FOR_QUEUE)
        run = AgentRun.objects.get(pk=run_id)
        return self._resume(run, segment, claim.data["suspended_state"], decision, who, on_step, on_delta=on_delta)

    def _resume(
        self,
        run: AgentRun,
        segment: str,
        suspended: Any,
        decision: bool,
        by: str | None,
        on_step: StepObserver | None,
        interruptible: bool = False,
        on_delta: DeltaObserver | None = None,
    ) -> RunResult:
        trace = SegmentTrace(
            run.pk,
            owner=segment,
            next_sequence=store.next_sequence(run.pk),
            on_step=on_step,
            interruptible=interruptible,
            on_delta=on_delta,
        )
        try:
            state = LoopState.from_dict(suspended or {})
            request = RunRequest.from_row(run)
        except (InvalidRequest, KeyError, TypeError, ValueError) as exc:  # settle, never strand the run
            return self._settle_unrunnable(run.pk, trace, exc)
        trace.usage, trace.iterations = state.usage, state.iterations
        return self._execute(
            run.pk, request, trace, lambda loop: loop.resume(state, approved=bool(decision), decision={"by": by})
        )

    def enqueue(
        self,
        request: RunRequest | dict[str, Any],
        *,
        owner: Any = None,
        fields: dict[str, Any] | None = None,
        wake: bool = True,
    ) -> uuid.UUID:
        """Store a ``queued`` run and wake a worker for it once the transaction commits.

        ``fields`` are more columns of the row (a thread's: ``threads.post``); ``wake=False``
        stores the run without dispatching it (a thread's message that waits its turn).

        A queue outage (Redis unreachable) leaves the run ``queued``: it is a durable row, and
        the queued sweep dispatches it once the queue is back (``submit`` says which happened).
        A queue that refuses the job for good (a bad configuration) is fail-closed: the run is
        settled ``failed`` (``enqueue_failed``) and ``EnqueueError`` is raised (logged instead
        when called inside ``atomic()``: the dispatch then runs after COMMIT); no queued row is
        left that nothing would ever wake. Raises ``InvalidRequest`` for a bad request.
        """
        return self._enqueue(request, owner, fields=fields, wake=wake)[0]

    def submit(self, request: RunRequest | dict[str, Any], *, owner: Any = None) -> RunResult:
        """``enqueue``, answering ``Outcome.QUEUED`` when the queue took the job, or
        ``Outcome.WAITING_FOR_QUEUE`` when it was unreachable (the run starts once it is back).
        Inside ``atomic()`` the dispatch waits for COMMIT, so the answer is ``QUEUED``."""
        run_id, dispatched = self._enqueue(request, owner)
        return _result(run_id, Outcome.QUEUED if dispatched.get("ok", True) else Outcome.WAITING_FOR_QUEUE)

    def _enqueue(
        self,
        request: RunRequest | dict[str, Any],
        owner: Any,
        *,
        fields: dict[str, Any] | None = None,
        wake: bool = True,
    ) -> tuple[uuid.UUID, dict[str, bool]]:
        request = request if isinstance(request, RunRequest) else RunRequest.from_mapping(request)
        run = store.create_queued({**request.row_fields(), "owner": owner, **(fields or {})}, request.as_dict())
        observe.started(run, "queued")
        dispatched: dict[str, bool] = {}
        if not wake:
            return run.pk, dispatched
        # Outside atomic() the hook runs now and EnqueueError reaches the caller. Inside, it runs
        # after COMMIT, where raising would drop the other hooks of that commit (other runs'
        # dispatches): there the failed run is settled and the error logged instead.
        transaction.on_commit(
            lambda: dispatched.update(ok=self._dispatch(run.pk, segment=0)),
            robust=transaction.get_connection().in_atomic_block,
        )
        return run.pk, dispatched

    def fork(
        self,
        parent_id: uuid.UUID | str,
        *,
        from_sequence: Any = None,
        overrides: dict[str, Any] | None = None,
        owner: Any = None,
        queued: bool = True,
        on_step: StepObserver | None = None,
    ) -> RunResult:
        """Start a NEW run that continues a stopped run from its step ``from_sequence``.

        The fork's first step (``forked``) holds the parent's transcript up to that step with
        every unanswered tool call answered; the parent is only read. Queued (a worker runs
        it, outcome ``queued``) or here, streaming to ``on_step``. ``overrides`` may change
        script, tools, max_iterations, provider, model and the limits; the rest is copied.
        Raises ``RunNotFound``, ``forks.ParentStillActive``, ``InvalidRequest`` (a bad
        ``from_sequence`` or override), ``EnqueueError`` like ``enqueue``.
        """
        plan = forks.plan(parse_run_id(parent_id), from_sequence, overrides)
        fields = {**plan.request.row_fields(), "owner": owner, **plan.lineage}
        if queued:
            robust = transaction.get_connection().in_atomic_block  # as in enqueue
            dispatched: dict[str, bool] = {}
            with transaction.atomic():
                run = store.create_queued(fields, plan.request.as_dict())
                store.append_event(run.pk, 0, plan.step, timezone.now())
                transaction.on_commit(lambda: dispatched.update(ok=self._dispatch(run.pk)), robust=robust)
            outcome = Outcome.QUEUED if dispatched.get("ok", True) else Outcome.WAITING_FOR_QUEUE
            return _result(run.pk, outcome, steps=1)
        segment = identity("interactive")
        run = store.begin(fields, claimed_by=segment, lease_expires=store.lease_until())
        trace = SegmentTrace(run.pk, owner=segment, next_sequence=0, on_step=on_step)
        return self._execute(run.pk, plan.request, trace, _opened(trace, plan.step))

    def post(
        self, thread_id: Any, request: RunRequest | dict[str, Any], *, owner: Any = None, strategy: str | None = None
    ) -> uuid.UUID:
        """Post a message to a thread: a queued run that follows ``strategy`` (``threads.post``)."""
        request = request if isinstance(request, RunRequest) else RunRequest.from_mapping(request)
        return threads.post(self, thread_id, request, owner=owner, strategy=strategy)

    def _wake_thread(self, thread_id: uuid.UUID | None) -> None:
        """A run of this thread stopped: dispatch the thread's next message, if one waits."""
        head = threads.next_up(thread_id)
        if head is not None:
            try:
                self._dispatch(head, segment=0)
            except dispatch.EnqueueError:
                logger.error("run %s: its thread's turn came but it could not be enqueued", head)

    def _dispatch(self, run_id: uuid.UUID, *, delay_seconds: float = 0, segment: int | None = None) -> bool:
        """Wake a worker for a queued run: ``True`` when the queue took the job, ``False`` when it
        was unreachable (the run stays queued, a durable row, and the queued sweep dispatches it
        once the queue is back: never failed for a transient outage). A refusal for good settles
        the run ``failed`` (``enqueue_failed``) and raises ``EnqueueError``."""
        try:
            dispatch.dispatch(run_id, delay_seconds=delay_seconds, segment=segment)
            return True
        except Exception as exc:
            if dispatch.is_outage(exc):
                logger.warning(
                    "run %s: the queue is unreachable (%s); the run stays queued for the queued sweep",
                    run_id,
                    type(exc).__name__,
                )
                observe.enqueue_deferred(run_id, exc)
                return False
            cause = f"{type(exc).__name__}: {_safe_message(exc)[:300]}"
            logger.error("run %s: enqueue failed (%s)", run_id, type(exc).__name__)
            store.settle(
                run_id,
                status=RunStatus.FAILED,
                reason=TerminationReason.ENQUEUE_FAILED,
                error_class=type(exc).__name__,
                error_message=cause,
            )
            observe.enqueue_failed(run_id, exc)
            raise dispatch.EnqueueError(run_id, cause) from None

    def run_queued(
        self, run_id: uuid.UUID | str, on_step: StepObserver | None = None, on_delta: DeltaObserver | None = None
    ) -> RunResult | None:
        """Claim a queued run (``queued → running``) and execute it here.

        Returns ``None`` and does nothing when the claim loses: the run was cancelled
        before a worker got to it, or another worker (or a second delivery of the same
        job) claimed it first. A run handed back to the queue mid-way (retry, reaped, worker
        shutdown) continues from its recorded stream. A stored request that cannot be
        rehydrated settles the run ``failed`` rather than stranding it.
        """
        run_id = parse_run_id(run_id)
        where = threads.place(run_id)
        if where is not None and threads.waits(where):
            return None  # a run before it in its thread has not stopped; its stop dispatches this one
        segment = identity("worker")
        claim = store.claim_queued(run_id, claimed_by=segment, lease_expires=store.lease_until())
        observe.claimed(run_id, segment, claim)
        if not claim.applied:
            return None
        payload = claim.data.get("request_payload") or {}
        if "resume" in payload:
            run = AgentRun.objects.get(pk=run_id)
            decision = payload["resume"]
            return self._resume(
                run,
                segment,
                run.suspended_state,
                bool(decision.get("approved")),
                decision.get("by"),
                on_step,
                interruptible=True,
                on_delta=on_delta,
            )
        sequence = claim.data.get("next_sequence")
        trace = SegmentTrace(
            run_id,
            owner=segment,
            next_sequence=store.next_sequence(run_id) if sequence is None else sequence,
            on_step=on_step,
            interruptible=True,
            on_delta=on_delta,
        )
        try:
            request = (
                RunRequest.from_row(AgentRun.objects.get(pk=run_id))
                if payload == store.RECOVER
                else RunRequest.from_mapping(payload)
            )
        except InvalidRequest as exc:
            return self._settle_unrunnable(run_id, trace, exc)
        if trace.next_sequence == 0 and where is not None:
            return self._execute(run_id, request, trace, _opened(trace, threads.opening(where, request)))
        if trace.next_sequence == 0:
            return self._execute(run_id, request, trace, lambda loop: loop.start(request.prompt, system=request.system))
        # Continue from the stream: it is the checkpoint of everything that already happened.
        state = rebuild_state(event_dict(e) for e in store.events(run_id))
        trace.usage, trace.iterations = state.usage, state.iterations
        return self._execute(run_id, request, trace, lambda loop: loop.proceed(state))

    @observe.segment
    def _execute(
        self, run_id: uuid.UUID, request: RunRequest, trace: SegmentTrace, drive: Callable[[ToolLoop], LoopResult]
    ) -> RunResult:
        """The ladder shared by every segment; cancels reach its calls in flight meanwhile."""
        deadline = trace.limits.limits.deadline_at

        def on_deadline() -> bool:  # on the watcher's thread: a deadline cuts the step in flight short
            return limits.enforce(run_id, usage=trace.usage, limits=trace.limits.limits) is not None

        unwatches = [
            watcher.watch(
                run_id, trace.token, deadline=deadline.timestamp() if deadline else None, on_deadline=on_deadline
            )
        ]

        def late(read: limits.RunLimits) -> None:  # the limits were read only at a later boundary: arm them now
            if read.deadline_at is not None:
                unwatches.append(
                    watcher.watch(run_id, trace.token, deadline=read.deadline_at.timestamp(), on_deadline=on_deadline)
                )

        trace.limits.on_late_read = late
        try:
            return self._ladder(run_id, request, trace, drive)
        finally:
            # No watch outlives its segment, and the hook (which holds the trace) goes with it:
            # the segment's token leaves this process's set of queued segments at once.
            trace.limits.on_late_read = None
            for unwatch in reversed(unwatches):
                unwatch()
            trace.ended()

    def _ladder(
        self, run_id: uuid.UUID, request: RunRequest, trace: SegmentTrace, drive: Callable[[ToolLoop], LoopResult]
    ) -> RunResult:
        try:
            loop = ToolLoop(
                registry.build_provider(request, run_id),
                registry.build_tools(request.tools, run_id),
                trace=trace,
                max_iterations=request.max_iterations,
                on_deny=request.on_deny,
                before_effect=trace.before_effect,
                token=trace.token,
                before_start=trace.before_start,
                on_delta=trace.delta,
                price=pricing.for_request(request),  # once per segment: the price in force now
            )
            result = drive(loop)
        except RunCancellationRequested:
            if trace.token.handing_back:  # the token tripped for a shutdown: hand back (or ack a cancel)
                return self._requeue(run_id, trace, count_attempt=False)
            # Before the generic handler: the cancel already won the row; never settle.
            return self._cancelled(run_id, trace)
        except RunLeaseLost:
            return _result(run_id, Outcome.LEASE_LOST, trace)
        except SegmentInterrupted:
            return self._requeue(run_id, trace, count_attempt=False)
        except Exception as exc:
            logger.exception("run %s: unexpected error in the runtime", run_id)
            return self._fail(run_id, trace, TerminationReason.INTERNAL_ERROR, exc)
        state = result.state
        if result.outcome == LoopOutcome.AWAITING_APPROVAL:
            fence = store.suspend(
                run_id, state=state.as_dict(), iterations=state.iterations, usage=state.usage, owner=trace.owner
            )
            return self._close(run_id, trace, fence, Outcome.AWAITING_APPROVAL, result, refused=Outcome.SUSPEND_FAILED)
        status, reason = _SETTLE[result.outcome]
        if result.outcome == LoopOutcome.PROVIDER_FAILED and trace.interruptible:
            # Queued runs retry transient model failures; permanent ones dead-letter at once.
            if isinstance(result.error, ProviderError) and result.error.retryable:
                attempts = AgentRun.objects.filter(pk=run_id).values_list("attempts", flat=True).first() or 0
                if RetryPolicy.from_settings().may_retry(attempts):
                    return self._requeue(run_id, trace, count_attempt=True, attempt=attempts, error=result.error)
                reason = TerminationReason.RETRIES_EXHAUSTED
            else:
                reason = TerminationReason.NOT_RETRYABLE
        fence = store.settle(
            run_id,
            status=status,
            reason=reason,
            iterations=state.iterations,
            usage=state.usage,
            final_text=result.final_text or "",
            owner=trace.owner,
            error_class=type(result.error).__name__ if result.error else "",
            error_message=_safe_message(result.error),
        )
        return self._close(run_id, trace, fence, Outcome(status.value), result)

    def _requeue(
        self,
        run_id: uuid.UUID,
        trace: SegmentTrace,
        *,
        count_attempt: bool,
        attempt: int = 0,
        error: BaseException | None = None,
    ) -> RunResult:
        """Hand a running run back to the queue; it continues from its stream in a worker."""
        fence = store.requeue(
            run_id,
            trace.owner,
            count_attempt=count_attempt,
            error_class=type(error).__name__ if error else "",
            error_message=_safe_message(error),
            iterations=trace.iterations,
            usage=trace.usage,
        )
        if not fence.applied:
            if fence.status == RunStatus.CANCELLED:
                return self._cancelled(run_id, trace)
            return _result(run_id, Outcome.LEASE_LOST, trace)
        delay = 0.0
        if count_attempt:
            delay = RetryPolicy.from_settings().delay(attempt)
        observe.requeued(run_id, trace, count_attempt, delay, error)
        try:
            self._dispatch(run_id, delay_seconds=delay)
        except dispatch.EnqueueError:
            return _result(run_id, Outcome.FAILED, trace)  # settled failed (enqueue_failed) by _dispatch
        return _result(run_id, Outcome.REQUEUED, trace)

    def _close(
        self,
        run_id: uuid.UUID,
        trace: SegmentTrace,
        fence: store.Transition,
        outcome: Outcome,
        result: LoopResult | None = None,
        refused: Outcome = Outcome.FAILED,
    ) -> RunResult:
        """Map a settle/suspend fence to the segment's result; a refused one reports the truth."""
        if not fence.applied:
            if fence.status == RunStatus.CANCELLED:
                return self._cancelled(run_id, trace)
            logger.warning("run %s: %s refused, row is %s", run_id, outcome, fence.status)
            # Writes are ownership-guarded: a queued or running row was reaped or taken by
            # another segment; a waiting one was suspended by someone else.
            if fence.status in (RunStatus.QUEUED, RunStatus.RUNNING):
                outcome = Outcome.LEASE_LOST
            elif fence.status == RunStatus.WAITING_FOR_APPROVAL:
                outcome = refused
        run = AgentRun.objects.filter(pk=run_id).first()
        if run is not None:
            observe.closed(run, fence, outcome)
            if run.thread_id is not None and run.stopped_at is not None:
                self._wake_thread(run.thread_id)
        return _result(run_id, outcome, trace, final_text=result.final_text if result else None, run=run)

    def _cancelled(self, run_id: uuid.UUID, trace: SegmentTrace) -> RunResult:
        trace.acknowledge_cancel()
        self._wake_thread(threads.thread_of(run_id))
        return _result(run_id, Outcome.CANCELLED, trace)

    def _settle_unrunnable(self, run_id: uuid.UUID, trace: SegmentTrace, exc: Exception) -> RunResult:
        return self._fail(run_id, trace, TerminationReason.INVALID_REQUEST, exc)

    def _fail(self, run_id: uuid.UUID, trace: SegmentTrace, reason: str, exc: BaseException) -> RunResult:
        """Settle the segment's run ``failed`` for ``reason``, naming the exception that caused it."""
        fence = store.settle(
            run_id,
            status=RunStatus.FAILED,
            reason=reason,
            iterations=trace.iterations,
            usage=trace.usage,
            owner=trace.owner,
            error_class=type(exc).__name__,
            error_message=_safe_message(exc),
        )
        return self._close(run_id, trace, fence, Outcome.FAILED)

    # --- control and reads ---------------------------------------------------------------
    @observe.cancel
    def cancel(
        self,
        run_id: uuid.UUID | str,
        *,
        by: Any = None,
        source: str,
        reason: str = "",
        termination_reason: str = TerminationReason.CANCELLED,
    ) -> CancelResult:
        """Cancel a run; terminal is terminal. Exactly one of two concurrent cancels wins.

        ``termination_reason`` says why, when it is more than an operator's cancel (a thread's
        message that interrupted it: ``interrupted_by_message``).
        """
        run_id = parse_run_id(run_id)
        fence = store.cancel(run_id, by=by, source=source, reason=reason, termination_reason=termination_reason)
        if fence.applied and fence.previous == RunStatus.RUNNING:
            # Executed by this process? Stop its step in flight without waiting for a signal.
            transaction.on_commit(lambda: watcher.cancelled_here(run_id))
        elif fence.applied:  # stopped at once: its thread's next message may go
            transaction.on_commit(lambda: self._wake_thread(threads.thread_of(run_id)))
        if not fence.found:
            outcome = CancelOutcome.NOT_FOUND
        elif fence.applied:
            outcome = CancelOutcome.CANCELLED
        elif fence.status == RunStatus.CANCELLED:
            outcome = CancelOutcome.ALREADY_CANCELLED
        else:
            outcome = CancelOutcome.ALREADY_FINISHED
        return CancelResult(run_id, outcome, fence.status, fence.previous, fence.data.get("provider"))

    @observe.cancel_many
    def cancel_many(
        self, selection: Any, *, by: Any = None, source: str, reason: str = "", dry_run: bool = False
    ) -> store.BulkCancel:
        """Cancel every active run of a queryset in a constant number of statements."""
        touched = [] if dry_run else threads.threads_among(selection)
        result = store.cancel_many(selection, by=by, source=source, reason=reason, dry_run=dry_run)
        if result.cancelled.get(RunStatus.RUNNING.value):
            transaction.on_commit(watcher.check_now)  # runs this process executes stop at once
        for thread_id in touched:  # queued and waiting runs stopped at once: their threads go on
            transaction.on_commit(lambda t=thread_id: self._wake_thread(t))
        return result

    @observe.reap
    def reap(self, *, limit: int = 100, dry_run: bool = False) -> store.ReapReport:
        """Requeue or dead-letter runs whose segment stopped renewing its lease (a dead worker).

        Overdue runs that nothing is executing are cancelled first (``deadline_exceeded``), so a
        dead worker's overdue run is stopped rather than requeued.
        """
        swept = limits.sweep(limit=limit, dry_run=dry_run)
        report = store.reap(limit=limit, dry_run=dry_run)
        report.deadline_cancelled = len(swept.cancelled)
        for run_id in [] if dry_run else report.requeued:
            try:
                self._dispatch(run_id)
            except dispatch.EnqueueError:
                logger.error("run %s: reaped but could not be enqueued; settled failed", run_id)
            # A queue outage leaves the requeued run queued: the queued sweep dispatches it.
        return report

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
