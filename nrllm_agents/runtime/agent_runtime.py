"""``AgentRuntime``: the one entry point every surface calls.

Segments (``run``, ``approve``, ``run_queued``) share one trace hook and one ladder, run by
the runtime's ``SegmentRunner`` (``runner.py``, held, not inherited): a cancellation is caught
before any generic handler, no settle is attempted (the cancel already won the row), the stop
is acknowledged, and the outcome is ``cancelled``.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from django.db import transaction
from django.utils import timezone

from .. import store
from ..access import policy
from ..admission.budgets import admit
from ..conf import app_settings
from ..domain import (
    LoopResult,
    LoopState,
    Step,
    ToolLoop,
    jsonlimits,
    rebuild_state,
)
from ..domain.sanitize import clean_value
from ..executors import dispatch
from ..live.interrupts import watcher
from ..models import AgentRun, AgentRunEvent, RunStatus, TerminationReason
from ..observability import hooks as observe
from ..observability import tracing
from ..presentation.outcomes import (
    ApprovalAmbiguous,
    ApprovalNotPending,
    CancelOutcome,
    CancelResult,
    DecisionMismatch,
    InvalidRunId,
    Outcome,
    RunNotFound,
    RunResult,
    parse_run_id,
)
from ..presentation.presenters import event_dict
from ..store import budgets, retention
from ..store.db import reconnecting
from ..validation.run_request import InvalidRequest, RunRequest
from . import forks, limits, threads, trees, worst_case
from .runner import SegmentRunner, run_result
from .segment import DeltaObserver, SegmentTrace, StepObserver, identity

__all__ = [
    "AgentRuntime",
    "ApprovalAmbiguous",
    "ApprovalNotPending",
    "CancelOutcome",
    "CancelResult",
    "DecisionMismatch",
    "InvalidRunId",
    "Outcome",
    "RunNotFound",
    "RunResult",
    "parse_run_id",
]

logger = logging.getLogger(__name__)

# How long a job tries its claim again on fresh connections: a terminated backend is replaced at
# once; past this the database is taken to be away and the job fails, for RQ's retries
# (``executors.CLAIM_RETRY_DELAYS``), instead of holding its worker for ``RECONNECT_SECONDS``.
CLAIM_RECONNECT_SECONDS = 5.0


def _opened(trace: SegmentTrace, step: Step) -> Callable[[ToolLoop], LoopResult]:
    """A drive that records ``step`` (a fork's or a thread run's first: it holds the transcript)
    like any step, then continues from the transcript it holds."""

    def drive(loop: ToolLoop) -> LoopResult:
        trace(step)  # recorded like any step: observed, and a boundary
        return loop.proceed(rebuild_state([{"kind": step.kind.value, "round": step.round, "payload": step.payload}]))

    return drive


def _recorded(decided: Mapping[str, Any]) -> dict[str, Any]:
    """What the approval step records beside the decision: who decided, and why when they said;
    for a call in doubt, what they said of it (and the result they gave)."""
    reason = decided.get("reason")
    recorded = {"by": decided.get("by"), **({"reason": str(reason)} if reason else {})}
    for key in ("in_doubt", "result"):
        if key in decided:
            recorded[key] = decided[key]
    return recorded


def _expects(run_id: uuid.UUID, *, in_doubt: bool) -> None:
    """Refuse a decision of the wrong kind for a waiting run (``DecisionMismatch``): an approval
    of a run whose call is in doubt, or a doubt's decision for one that only waits for approval.
    A run not waiting is left to the claim to refuse (``ApprovalNotPending``)."""
    row = AgentRun.objects.filter(pk=run_id, status=RunStatus.WAITING_FOR_APPROVAL).values("suspended_state").first()
    if row is None:
        return
    doubted = isinstance(row["suspended_state"], dict) and row["suspended_state"].get("in_doubt") is not None
    if doubted != in_doubt:
        raise DecisionMismatch(run_id, doubted)


def _doubt(state: LoopState, effect: Any) -> None:
    """A run continued after its worker was lost: when the write fence's stamp names a call of
    its last turn with no recorded step, that call may or may not have happened. With
    ``IN_DOUBT = "wait"`` the state says so, and the loop suspends for a person's decision
    instead of making it again (the reaper dead-letters the run instead with ``"fail"``)."""
    call = effect.get("call") if isinstance(effect, dict) else None
    if app_settings.IN_DOUBT == "fail" or not isinstance(call, dict) or state.in_doubt is not None:
        return
    if call.get("id") in {c.id for c in state.pending_calls}:
        state.in_doubt = {"call": call, "at": effect.get("at")}


def _fresh(request: RunRequest) -> Callable[[ToolLoop], LoopResult]:
    """A drive that starts the loop from the request's prompt."""
    return lambda loop: loop.start(request.prompt, system=request.system)


class AgentRuntime:
    """Starts, resumes, queues, recovers and cancels runs. Stateless; cheap to construct."""

    def __init__(self) -> None:
        self.segments = SegmentRunner()

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

        Raises ``InvalidRequest`` for a bad request, ``policy.UseRefused`` when ``owner`` may not
        use its saved agent or connection, ``BudgetRefused`` when a shared budget covering it has
        nothing left; never raises for a run outcome.
        """
        request = request if isinstance(request, RunRequest) else RunRequest.from_mapping(request)
        _admit(owner, request)
        segment = identity("interactive")
        run = store.begin(
            {**request.row_fields(), "owner": owner, **tracing.stored()},
            claimed_by=segment,
            lease_expires=store.lease_until(),
        )
        observe.started(run, "interactive")
        trace = SegmentTrace(run.pk, owner=segment, next_sequence=0, on_step=on_step, on_delta=on_delta)
        return self.segments.execute(run.pk, request, trace, _fresh(request))

    def approve(
        self,
        run_id: uuid.UUID | str,
        decision: bool,
        *,
        by: Any = None,
        on_step: StepObserver | None = None,
        queued: bool = False,
        on_delta: DeltaObserver | None = None,
        reason: str = "",
    ) -> RunResult:
        """Resume a waiting run with a human decision on its pending calls.

        Here by default; with ``queued=True`` the decision is stored and a worker resumes
        the run (outcome ``queued``). ``reason`` (why the human decided so) is recorded on the
        approval step, when given. Raises ``RunNotFound``, or ``ApprovalNotPending`` when
        the run is not waiting (already resumed by someone else, cancelled, finished).
        """
        run_id = parse_run_id(run_id)
        who = by.get_username() if by is not None and hasattr(by, "get_username") else by
        decided = {"approved": bool(decision), "by": who, **({"reason": reason} if reason else {})}
        _expects(run_id, in_doubt=False)
        return self._decide(run_id, decided, on_step=on_step, queued=queued, on_delta=on_delta)

    def resolve(
        self,
        run_id: uuid.UUID | str,
        happened: bool,
        *,
        result: Any = None,
        by: Any = None,
        reason: str = "",
        queued: bool = False,
        on_step: StepObserver | None = None,
        on_delta: DeltaObserver | None = None,
    ) -> RunResult:
        """Decide on a call in doubt (a lost worker may or may not have made it) and resume the run.

        ``happened``: the call did happen, and ``result`` (any JSON value) is recorded as its
        step; it is not made again. Not ``happened``: the call is made again. The decision (who,
        why, which call) is an ``approval`` step. The third decision is ``cancel``. Here by
        default, or (``queued``) in a worker. Raises ``RunNotFound``, ``ApprovalNotPending`` (not
        waiting) or ``DecisionMismatch`` (waiting for an approval, no call in doubt).
        """
        run_id = parse_run_id(run_id)
        who = by.get_username() if by is not None and hasattr(by, "get_username") else by
        decided: dict[str, Any] = {"approved": True, "in_doubt": "happened" if happened else "not_happened", "by": who}
        if happened:
            if jsonlimits.value_too_deep(result) or jsonlimits.value_too_large(result):
                raise InvalidRequest(
                    {"result": f"{jsonlimits.SIZE_ERROR}, nested at most {jsonlimits.MAX_JSON_DEPTH} deep"}
                )
            decided["result"] = clean_value(result)  # recorded as the call's result: made storable
        if reason:
            decided["reason"] = reason
        _expects(run_id, in_doubt=True)
        return self._decide(run_id, decided, on_step=on_step, queued=queued, on_delta=on_delta)

    def _decide(
        self,
        run_id: uuid.UUID,
        decided: dict[str, Any],
        *,
        on_step: StepObserver | None,
        queued: bool,
        on_delta: DeltaObserver | None,
    ) -> RunResult:
        """Resume a waiting run with ``decided`` (an approval's or a doubt's): here, or in a worker."""
        segment = identity("resume")
        if queued:
            claim = store.requeue_for_resume(run_id, {"resume": decided})
        else:
            claim = store.claim_for_resume(run_id, claimed_by=segment, lease_expires=store.lease_until())
        if not claim.found:
            raise RunNotFound(run_id)
        if not claim.applied:
            raise ApprovalNotPending(run_id, claim.status or "")
        if queued:
            dispatched = self.segments.dispatch_run(run_id)
            return run_result(run_id, Outcome.QUEUED if dispatched else Outcome.WAITING_FOR_QUEUE)
        run = AgentRun.objects.get(pk=run_id)
        return self._resume(run, segment, claim.data["suspended_state"], decided, on_step, on_delta=on_delta)

    def approval_target(self, run_id: uuid.UUID | str, *, pick: uuid.UUID | str | None = None) -> uuid.UUID:
        """The run a decision on ``run_id`` approves: itself, or the one run of its subtree that
        waits for approval (the root of a tree surfaces its children's); ``pick`` names one of
        several. Raises ``RunNotFound`` or ``ApprovalAmbiguous`` (``trees.approval_target``)."""
        return trees.approval_target(parse_run_id(run_id), None if pick is None else parse_run_id(pick))

    def _resume(
        self,
        run: AgentRun,
        segment: str,
        suspended: Any,
        decided: Mapping[str, Any],
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
            return self.segments.settle_unrunnable(run.pk, trace, exc)
        trace.usage, trace.iterations = state.usage, state.iterations
        return self.segments.execute(
            run.pk,
            request,
            trace,
            lambda loop: loop.resume(state, approved=bool(decided.get("approved")), decision=_recorded(decided)),
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
        return run_result(run_id, Outcome.QUEUED if dispatched.get("ok", True) else Outcome.WAITING_FOR_QUEUE)

    def _enqueue(
        self,
        request: RunRequest | dict[str, Any],
        owner: Any,
        *,
        fields: dict[str, Any] | None = None,
        wake: bool = True,
    ) -> tuple[uuid.UUID, dict[str, bool]]:
        request = request if isinstance(request, RunRequest) else RunRequest.from_mapping(request)
        _admit(owner, request)
        row = {**request.row_fields(), "owner": owner, **tracing.stored(), **(fields or {})}  # continues the trace
        run = store.create_queued(row, request.as_dict())
        observe.started(run, "queued")
        dispatched: dict[str, bool] = {}
        if not wake:
            return run.pk, dispatched
        # Outside atomic() the hook runs now and EnqueueError reaches the caller. Inside, it runs
        # after COMMIT, where raising would drop the other hooks of that commit (other runs'
        # dispatches): there the failed run is settled and the error logged instead.
        transaction.on_commit(
            lambda: dispatched.update(ok=self.segments.dispatch_run(run.pk, segment=0)),
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
        _admit(owner, plan.request)
        fields = {**plan.request.row_fields(), "owner": owner, **plan.lineage, **tracing.stored()}
        if queued:
            robust = transaction.get_connection().in_atomic_block  # as in enqueue
            dispatched: dict[str, bool] = {}
            with transaction.atomic():
                run = store.create_queued(fields, plan.request.as_dict())
                store.append_event(run.pk, 0, plan.step, timezone.now())
                transaction.on_commit(lambda: dispatched.update(ok=self.segments.dispatch_run(run.pk)), robust=robust)
            outcome = Outcome.QUEUED if dispatched.get("ok", True) else Outcome.WAITING_FOR_QUEUE
            return run_result(run.pk, outcome, steps=1)
        segment = identity("interactive")
        run = store.begin(fields, claimed_by=segment, lease_expires=store.lease_until())
        trace = SegmentTrace(run.pk, owner=segment, next_sequence=0, on_step=on_step)
        return self.segments.execute(run.pk, plan.request, trace, _opened(trace, plan.step))

    def check_use(self, request: RunRequest, *, owner: Any) -> None:
        """Raise ``policy.UseRefused`` when ``owner`` may not use the saved agent or connection of
        ``request``. Every start asks it; a surface that writes something before it starts a run
        (a thread it creates) asks first."""
        _may_use(owner, request)

    def post(
        self, thread_id: Any, request: RunRequest | dict[str, Any], *, owner: Any = None, strategy: str | None = None
    ) -> uuid.UUID:
        """Post a message to a thread: a queued run that follows ``strategy`` (``threads.post``)."""
        request = request if isinstance(request, RunRequest) else RunRequest.from_mapping(request)
        _may_use(owner, request)  # before the thread's active run is interrupted for it
        return threads.post(self, thread_id, request, owner=owner, strategy=strategy)

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
        segment = identity("worker")
        # A connection that dies before the segment starts (the claim, the reads that shape the
        # segment) is replaced and that part tried again at once, the claim recognising its own
        # earlier win: the run neither waits for a retried job nor for the reaper (issue 44, item 16).
        # A database away for longer fails the job soon, for the queue's own retries.
        start = reconnecting(lambda: self._claimed(run_id, segment, on_step, on_delta), seconds=CLAIM_RECONNECT_SECONDS)
        return None if start is None else start()

    def _claimed(
        self, run_id: uuid.UUID, segment: str, on_step: StepObserver | None, on_delta: DeltaObserver | None
    ) -> Callable[[], RunResult] | None:
        """``run_queued``'s claim and reads: the segment to execute, or ``None`` (claim lost)."""
        where = threads.place(run_id)
        if where is not None and threads.waits(where):
            return None  # a run before it in its thread has not stopped; its stop dispatches this one
        claim = store.claim_queued(run_id, claimed_by=segment, lease_expires=store.lease_until())
        observe.claimed(run_id, segment, claim)
        if not claim.applied:
            return None
        payload = claim.data.get("request_payload") or {}
        if "resume" in payload:
            run = AgentRun.objects.get(pk=run_id)
            return functools.partial(
                self._resume,
                run,
                segment,
                run.suspended_state,
                payload["resume"],
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
        row = AgentRun.objects.get(pk=run_id) if payload == store.RECOVER else None
        try:
            request = RunRequest.from_row(row) if row is not None else RunRequest.from_mapping(payload)
        except InvalidRequest as exc:
            return functools.partial(self.segments.settle_unrunnable, run_id, trace, exc)
        if trace.next_sequence == 0 and where is not None:
            opening = threads.opening(where, request)
            return functools.partial(self.segments.execute, run_id, request, trace, _opened(trace, opening))
        if trace.next_sequence == 0:
            return functools.partial(self.segments.execute, run_id, request, trace, _fresh(request))
        # Continue from the stream: it is the checkpoint of everything that already happened.
        state = rebuild_state(event_dict(e) for e in store.events(run_id))
        _doubt(state, row.pending_effect if row is not None else None)
        trace.usage, trace.iterations = state.usage, state.iterations
        return functools.partial(self.segments.execute, run_id, request, trace, lambda loop: loop.proceed(state))

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
        # The run and every run below it (its sub-agents'), in one fence (runtime.trees).
        tree = trees.cancel(run_id, by=by, source=source, reason=reason, termination_reason=termination_reason)
        fence = tree.transition
        if fence.applied and fence.previous == RunStatus.RUNNING:
            # Executed by this process? Stop its step in flight without waiting for a signal.
            transaction.on_commit(lambda: watcher.cancelled_here(run_id))
        elif fence.applied:  # stopped at once: its thread's next message, or its parent, may go
            transaction.on_commit(lambda: self.segments.wake_thread(threads.thread_of(run_id)))
            if not tree.lone:  # a run of no tree has no parent waiting for it
                transaction.on_commit(lambda: trees.child_ended(run_id, self.segments.dispatch_run))
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
        if result.cancelled.get(RunStatus.RUNNING.value) or result.cascaded:
            transaction.on_commit(watcher.check_now)  # runs this process executes stop at once
        for thread_id in touched:  # queued and waiting runs stopped at once: their threads go on
            transaction.on_commit(functools.partial(self.segments.wake_thread, thread_id))
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
        if not dry_run:  # after the requeues: a reaped run's segment is dead, and so is its hold
            report.holds_released = budgets.release_dead()
            # parents whose last child ended without waking them (its process died, or it was reaped)
            trees.wake_stranded(self.segments.dispatch_run, limit=limit)
        for run_id in [] if dry_run else report.requeued:
            try:
                self.segments.dispatch_run(run_id)
            except dispatch.EnqueueError:
                logger.error("run %s: reaped but could not be enqueued; settled failed", run_id)
            # A queue outage leaves the requeued run queued: the queued sweep dispatches it.
        return report

    def retain(self, *, dry_run: bool = False, max_batches: int | None = None) -> retention.RetentionReport:
        """Apply ``NRLLM_AGENTS["RETENTION"]``: delete stopped trees past ``runs_days``, purge
        stopped runs' content past ``content_days`` (``store.retention``), in short batches.
        Runs still moving are never touched. ``dry_run``: count what is due, change nothing."""
        return retention.apply(dry_run=dry_run, max_batches=max_batches)

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


def _may_use(owner: Any, request: RunRequest) -> None:
    """Raise ``policy.UseRefused`` when ``owner`` may not use the saved agent or the connection
    ``request`` starts with: every surface that starts a run passes here, before anything is
    written."""
    policy.check_use(owner, request.agent, request.connection)


def _admit(owner: Any, request: RunRequest) -> None:
    """Ask the policy whether ``owner`` may use what the run names (``_may_use``), then count the
    new run against the shared budgets covering it, which must have room for its first call's
    worst case (``worst_case.first_call``); raises ``UseRefused`` or ``BudgetRefused``."""
    _may_use(owner, request)
    admit(owner, request.agent_record["id"] if request.agent_record else None, lambda: worst_case.first_call(request))
