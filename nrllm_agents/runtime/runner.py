"""The segment runner: the ladder every segment goes through, and how its end maps to what the
runtime returns.

``AgentRuntime`` holds one ``SegmentRunner`` (``runtime.segments``): ``execute`` arms the cancel
watcher and the deadline, then ``_ladder`` drives the tool loop. A cancellation is caught before any generic
handler, no settle is attempted (the cancel already won the row), the stop is acknowledged, and
the outcome is ``cancelled``. A settle, suspend or hand-back that a fence refused reports the
truth (``_close``). ``dispatch`` wakes a worker for a queued run (a hand-back, a reaped run).
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable
from typing import Any

from django.db import DatabaseError

from .. import store
from ..catalog import registry
from ..domain import (
    ConfigurationError,
    LoopOutcome,
    LoopResult,
    ProviderError,
    RunCancellationRequested,
    RunLeaseLost,
    SegmentInterrupted,
    ToolLoop,
    Usage,
)
from ..domain.sanitize import clean_text
from ..executors import dispatch
from ..live.interrupts import watcher
from ..models import AgentRun, RunStatus, TerminationReason
from ..money import pricing
from ..observability import hooks as observe
from ..presentation.outcomes import Outcome, RunResult
from ..store.db import connection_lost, reconnecting
from ..store.retries import RetryPolicy
from ..validation.run_request import RunRequest
from . import limits, signals, threads, trees
from .segment import SegmentTrace

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


def run_result(
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


class SegmentRunner:
    """Runs one segment through the ladder and reports its result; stateless. ``AgentRuntime``
    holds one and adds the entry points."""

    def wake_thread(self, thread_id: uuid.UUID | None) -> None:
        """A run of this thread stopped: dispatch the thread's next message, if one waits."""
        head = threads.next_up(thread_id)
        if head is not None:
            try:
                self.dispatch_run(head, segment=0)
            except dispatch.EnqueueError:
                logger.error("run %s: its thread's turn came but it could not be enqueued", head)

    def dispatch_run(self, run_id: uuid.UUID, *, delay_seconds: float = 0, segment: int | None = None) -> bool:
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
                    "run %s: the %s is unreachable (%s); the run stays queued for the queued sweep",
                    run_id,
                    "database" if connection_lost(exc) else "queue",
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

    @observe.segment
    def execute(
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
            result = self._ladder(run_id, request, trace, drive)
            signals.announce_end(
                run_id, result.outcome.value, result.status, result.termination_reason, result.final_text
            )
            return result
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
            provider, price = registry.build_provider(request, run_id), pricing.for_request(request)
            trace.spend.arm(provider, price)
            tools: dict[str, Any] = {**registry.build_tools(request.tools, run_id), **trees.tools_for(request, run_id)}
            loop = ToolLoop(
                provider,
                tools,
                trace=trace,
                max_iterations=request.max_iterations,
                on_deny=request.on_deny,
                before_effect=trace.before_effect,
                token=trace.token,
                before_start=trace.before_start,
                on_delta=trace.delta,
                on_progress=trace.progress,
                price=price,  # once per segment: the price in force now
                before_call=trace.before_call,
                carrier=trace.spans.starting if trace.spans is not None else None,  # traced: spans per call
                run_id=str(run_id),  # each tool call's idempotency key
                in_transaction=trace.transaction,  # a transactional tool's writes commit with its step
            )
            result = drive(loop)
        except RunCancellationRequested:
            if trace.token.handing_back:  # the token tripped for a shutdown: hand back (or ack a cancel)
                return self._requeue(run_id, trace, count_attempt=False)
            # Before the generic handler: the cancel already won the row; never settle.
            return self._cancelled(run_id, trace)
        except RunLeaseLost:
            return run_result(run_id, Outcome.LEASE_LOST, trace)
        except SegmentInterrupted:
            return self._requeue(run_id, trace, count_attempt=False)
        except ConfigurationError as exc:  # what an operator must fix: no traceback, no retry
            logger.warning("run %s: cannot be built as configured: %s", run_id, _safe_message(exc))
            return reconnecting(
                functools.partial(self._fail, run_id, trace, TerminationReason.CONFIGURATION_FAILED, exc)
            )
        except Exception as exc:
            if connection_lost(exc) and trace.interruptible:
                # The run's connection died (its step boundaries ride that out on fresh ones):
                # no fault of the run. It goes back to the queue now, on a fresh connection, and
                # continues from its stream; it does not wait for the reaper.
                logger.warning("run %s: its database connection was lost (%s); handed back", run_id, type(exc).__name__)
                return reconnecting(lambda: self._requeue(run_id, trace, count_attempt=False))
            logger.exception("run %s: unexpected error in the runtime", run_id)
            return reconnecting(functools.partial(self._fail, run_id, trace, TerminationReason.INTERNAL_ERROR, exc))
        return reconnecting(lambda: self._settled(run_id, trace, result, tools))

    def _settled(self, run_id: uuid.UUID, trace: SegmentTrace, result: LoopResult, tools: dict[str, Any]) -> RunResult:
        """The loop ended: settle, suspend or requeue the run as its outcome says (on a fresh
        connection if the one it used died: ``db.reconnecting``)."""
        state = result.state
        if result.outcome == LoopOutcome.AWAITING_APPROVAL:
            fence = store.suspend(
                run_id, state=state.as_dict(), iterations=state.iterations, usage=state.usage, owner=trace.owner
            )
            return self._close(run_id, trace, fence, Outcome.AWAITING_APPROVAL, result, refused=Outcome.SUSPEND_FAILED)
        if result.outcome == LoopOutcome.AWAITING_CHILDREN:
            return self._await_children(run_id, trace, result, tools)
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

    def _await_children(
        self, run_id: uuid.UUID, trace: SegmentTrace, result: LoopResult, tools: dict[str, Any]
    ) -> RunResult:
        """Suspend the run for its sub-agents' runs and start them; it holds no worker meanwhile."""
        fence = trees.suspend_for_children(
            run_id,
            owner=trace.owner,
            state=result.state,
            tools=tools,
            call_sequence=trace.last_sequence,
            spawning=trace.spans.spawning if trace.spans is not None else None,  # traced: a span per call
        )
        if fence.applied:
            if fence.data.get("children"):
                observe.children_started(run_id, len(fence.data["children"]))
            for child in fence.data.get("children", []):
                try:
                    self.dispatch_run(child, segment=0)
                except dispatch.EnqueueError:
                    logger.error("run %s: its sub-agent run %s could not be enqueued", run_id, child)
            trees.wake(run_id, self.dispatch_run)  # its children had all ended already (a run continued)
        return self._close(run_id, trace, fence, Outcome.AWAITING_CHILDREN, result, refused=Outcome.SUSPEND_FAILED)

    def _requeue(
        self,
        run_id: uuid.UUID,
        trace: SegmentTrace,
        *,
        count_attempt: bool,
        attempt: int = 0,
        error: BaseException | None = None,
    ) -> RunResult:
        """Hand a running run back to the queue; it continues from its stream in a worker.

        The hand-back is tried on fresh connections while the one it used dies. A try that
        died after its commit leaves the row queued and the next try refused: that refusal is
        this segment's own hand-back whose reply was lost, so the run is still dispatched (a
        queued row that no job would wake waits for the queued sweep)."""
        lost = False

        def hand_back() -> store.Transition:
            nonlocal lost
            try:
                return store.requeue(
                    run_id,
                    trace.owner,
                    count_attempt=count_attempt,
                    error_class=type(error).__name__ if error else "",
                    error_message=_safe_message(error),
                    iterations=trace.iterations,
                    usage=trace.usage,
                )
            except Exception as exc:
                lost = lost or connection_lost(exc)
                raise

        fence = reconnecting(hand_back)
        if not fence.applied and lost and fence.status == RunStatus.QUEUED:
            fence = store.Transition(True, RunStatus.QUEUED, RunStatus.RUNNING)
        if not fence.applied:
            if fence.status == RunStatus.CANCELLED:
                return self._cancelled(run_id, trace)
            return run_result(run_id, Outcome.LEASE_LOST, trace)
        delay = 0.0
        if count_attempt:
            delay = RetryPolicy.from_settings().delay(attempt)
        observe.requeued(run_id, trace, count_attempt, delay, error)
        try:
            self.dispatch_run(run_id, delay_seconds=delay)
        except dispatch.EnqueueError:
            return run_result(run_id, Outcome.FAILED, trace)  # settled failed (enqueue_failed) by _dispatch
        return run_result(run_id, Outcome.REQUEUED, trace)

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
            elif fence.status in (RunStatus.WAITING_FOR_APPROVAL, RunStatus.WAITING_FOR_CHILDREN):
                outcome = refused
        run = AgentRun.objects.filter(pk=run_id).first()
        if run is not None:
            observe.closed(run, fence, outcome)
            if run.thread_id is not None and run.stopped_at is not None:
                self.wake_thread(run.thread_id)
            if run.tree_parent_id is not None and run.stopped_at is not None:
                trees.wake(run.tree_parent_id, self.dispatch_run)
        return run_result(run_id, outcome, trace, final_text=result.final_text if result else None, run=run)

    def _cancelled(self, run_id: uuid.UUID, trace: SegmentTrace) -> RunResult:
        trace.acknowledge_cancel()
        self.wake_thread(threads.thread_of(run_id))
        trees.child_ended(run_id, self.dispatch_run)
        return run_result(run_id, Outcome.CANCELLED, trace)

    def settle_unrunnable(self, run_id: uuid.UUID, trace: SegmentTrace, exc: Exception) -> RunResult:
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
