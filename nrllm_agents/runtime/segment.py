"""One segment's trace hook: prove ownership, observe, record, and stop at a cancelled boundary.

``run()``, ``approve()`` and ``run_queued()`` all build their hook here, so they behave
identically at every step boundary.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar, cast

from django.db import DatabaseError, IntegrityError, connection
from django.db import transaction as db_transaction
from django.utils import timezone

from .. import store
from ..domain import (
    CancelToken,
    RunCancellationRequested,
    RunLeaseLost,
    SegmentInterrupted,
    Step,
    StepKind,
    ToolCall,
    Usage,
)
from ..live.deltas import publisher
from ..models import AgentRunEvent
from ..observability import hooks as observe
from ..presentation.presenters import event_dict, step_dict
from ..store import Lease
from ..store.budgets import Charge
from ..store.db import drop_connection, reconnect_seconds, reconnecting, release_connection
from . import limits, signals, spend

logger = logging.getLogger(__name__)

StepObserver = Callable[[dict[str, Any]], None]
DeltaObserver = Callable[[dict[str, Any]], None]
PROGRESS_MESSAGE_CHARS = 300  # a progress notice stays far below NOTIFY's 8,000 bytes
T = TypeVar("T")

# A guarded boundary statement that failed on its own (a statement timeout, a lock timeout, a
# deadlock, a cancelled backend) is tried again after these pauses, in seconds.
RETRY_PAUSES = (0.002, 0.005, 0.01, 0.02)
RECONNECT_PAUSE = 0.25  # then, while the connection itself keeps failing (db.reconnect_seconds())

shutdown_requested = threading.Event()
"""Set (by a worker's SIGTERM handler) when this process must hand its runs back to the queue."""

_handing_back_lock = threading.Lock()
_queued_tokens: weakref.WeakSet[CancelToken] = weakref.WeakSet()  # tokens of this process's queued segments


def drain() -> None:
    """This process shuts down gently: every queued segment hands its run back at its next
    boundary, once the step in flight (a model call, a tool) has ended and been recorded, so the
    next worker repeats nothing. ``hand_back_all`` cuts short what is still in flight when the
    grace period is over. Safe to call from any thread (a signal handler included)."""
    shutdown_requested.set()


def hand_back_all() -> int:
    """This process shuts down: every queued segment hands its run back at its next boundary.

    Sets ``shutdown_requested`` and ends the interruptible waits of the steps in flight (the
    cancel token's ``hand_back``), so a hand-back does not wait for a 30 s model call or tool.
    The cut-short step is not recorded: the worker that continues the run repeats it. A
    non-idempotent tool in flight is not cut short; its run is handed back at its boundary.
    Returns the number of steps cut short. Safe to call from any thread, more than once.
    """
    shutdown_requested.set()
    with _handing_back_lock:
        tokens = list(_queued_tokens)
    return sum(1 for token in tokens if token.hand_back())


def identity(role: str) -> str:
    """Who executes a segment: ``role:host:pid:token`` (the token tells threads apart)."""
    return f"{role}:{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class SegmentTrace:
    """The trace hook handed to the tool loop for one segment.

    At each step, in order: hand it to ``on_step``; renew the lease with an ownership-guarded write
    and record the step in the same commit (the renewal is also the cancellation probe: it matches no
    row once the run is cancelled or lost); then stop if the run was cancelled.

    - cancelled while ours: the step in flight is recorded, then ``RunCancellationRequested``;
    - lost (reaped, owned by another segment): nothing is written, ``RunLeaseLost``;
    - the store cannot be reached: "not cancelled", the run goes on (never a fabricated cancel);
    - a failing observer is logged and ignored: watching never stops a run.

    A boundary statement that fails on its own is retried a few milliseconds later; if it still
    fails, the step is appended only while the run is still this segment's, and the row is read again
    before the next call starts. It also tracks the spend so far (for a cancel's acknowledgement) and
    holds the segment's cancel token.
    """

    def __init__(
        self,
        run_id: uuid.UUID,
        *,
        owner: str,
        next_sequence: int,
        on_step: StepObserver | None = None,
        interruptible: bool = False,
        on_delta: DeltaObserver | None = None,
    ) -> None:
        self.run_id = run_id
        self.owner = owner
        self.next_sequence = next_sequence
        self.on_step = on_step
        self.on_delta = on_delta
        self.usage = Usage()
        self.iterations = 0
        self.interruptible = interruptible
        self.round = 0
        self.recorded = 0
        self.token = CancelToken()
        if interruptible:  # a queued segment: handed back when its process shuts down
            with _handing_back_lock:
                _queued_tokens.add(self.token)
            if shutdown_requested.is_set():
                self.token.hand_back()
        self._effect_stamped = False
        self._recheck = False  # a boundary could not renew the lease: read the row before the next start
        self._interrupted_sequence: int | None = None  # the step a cancel cut short
        self._stopped_at: datetime | None = None  # the end of the step after which a cancel stopped the work
        self._delta_round = -1
        self._delta_offset = 0
        self.limits = limits.Enforcer(run_id)
        self.spend = spend.Spend(run_id, owner)
        self.spans: Any = None  # the segment's spans while this process traces (observability.spans)
        self._in_transaction = False  # a transactional tool runs: its step commits with its writes
        self._after_commit: BaseException | None = None  # a stop that comes after that commit

    @property
    def last_sequence(self) -> int | None:
        return self.next_sequence - 1 if self.next_sequence else None

    def __call__(self, step: Step) -> None:
        if self.token.handing_back and step.payload.get("interrupted"):
            # Cut short by a shutdown, not a cancel: record nothing; the next worker repeats it.
            raise SegmentInterrupted()
        sequence, created_at = self.next_sequence, timezone.now()
        charge = None
        if step.kind == StepKind.LLM:
            spent = Usage() if step.payload.get("failed") else Usage.from_dict(step.payload.get("usage"))
            if not step.payload.get("failed"):  # a failed call is no iteration
                self.usage = self.usage + spent
                self.iterations += 1
            charge = self.spend.charge(spent)  # settled with the step, in its fence: both or neither
        self.round = step.round
        if self.on_step is not None:  # building the dict is work the hot path skips when nobody watches
            self._notify(step_dict(**store.step_columns(self.run_id, sequence, step, created_at)))
        cancelled = False
        try:
            # A token tripped by a cancel means the row was read ``cancelled``: no renewal can
            # match, so the step in flight goes straight to the guarded append (two round trips
            # fewer to stop). One tripped by a shutdown hand-back (a step that was not cut short)
            # is appended the same way; the runtime then hands the run back.
            known_cancelled = self.token.cancelled
            recorded = (
                Lease.NOT_HELD
                if known_cancelled
                else _retried(lambda: _timed_record(self.run_id, self.owner, sequence, step, created_at, charge))
            )
            if recorded is not Lease.HELD:
                # Not renewed: cancelled while ours (the step in flight is still recorded), lost
                # (raises, writing nothing), or unknown (the store failed: "not cancelled", and
                # the row is read again before anything else starts).
                cancelled = known_cancelled or self._cancelled_while_ours(recorded)
                appended = _retried(
                    lambda: store.append_owned(self.run_id, self.owner, sequence, step, created_at, charge),
                    on_error=True,
                )
                if appended is not Lease.HELD:
                    self._cancelled_while_ours(Lease.NOT_HELD)  # taken away in between: raises RunLeaseLost
                    raise RunLeaseLost()
                self._recheck = not cancelled
        except IntegrityError:
            # Someone else wrote this sequence: another segment owns the run now. Unless this
            # segment wrote it itself: a connection that died before the commit's answer came
            # back, and the write tried again on a fresh one (``_retried``); its charge was
            # settled in that same committed statement.
            if not reconnecting(lambda: _recorded_here(self.run_id, sequence, step, created_at)):
                raise RunLeaseLost() from None
        if charge is not None:
            self.spend.charged(charge)
        if step.kind == StepKind.LLM:
            publisher.discard(self.run_id)  # the recorded answer replaces its pending pieces
        if step.payload.get("interrupted"):
            self._interrupted_sequence = sequence
        self.next_sequence += 1
        self.recorded += 1
        observe.step(self, step, sequence)
        signals.announce_step(self.run_id, sequence, step.kind.value)
        if step.kind == StepKind.TOOL:
            self.token.shield(False)
        if self._effect_stamped and step.kind == StepKind.TOOL:
            # Cleared only after the tool's step is recorded: a crash in between leaves the
            # stamp, and the run is then dead-lettered rather than repeating the write.
            cleared = store.renew(self.run_id, self.owner, clear_effect=True)
            self._effect_stamped = cleared is Lease.UNKNOWN  # a store hiccup: try again after the next tool
        # Cancelled while ours: inside a transactional tool's transaction this stop rolls the step
        # back with the tool's writes (``transaction``). A stop decided after a held record (a
        # deadline, a budget, a shutdown) comes after the commit instead.
        rolls_back = cancelled
        cancelled = cancelled or self.limits(step, self.usage) is not None  # a deadline or budget stops it here
        stop: BaseException | None = None
        if cancelled:
            self._stopped_at = created_at  # the work stopped with this step: its end, recorded with it
            stop = RunCancellationRequested(boundary_sequence=sequence)
        elif self.interruptible and shutdown_requested.is_set():
            stop = SegmentInterrupted()
        if stop is not None:
            if self._in_transaction and not rolls_back:
                self._after_commit = stop
                return
            raise stop

    def transaction(self, body: Callable[[], T]) -> T:
        """``body()`` (a transactional tool's call and its ``tool`` step) in one database
        transaction: the tool's writes commit with its step, through the step's fence.

        Whatever ``body`` raises rolls both back, and this trace forgets the step it had counted;
        that includes the fence refusing the step (the run was cancelled: the caller then
        records the call as interrupted and rolled back; or lost: nothing is written). A stop
        decided once the step was recorded under a held lease (a deadline, a budget, a
        shutdown) is raised after the commit. A commit that fails (the connection died) leaves
        neither the writes nor the step: the run's next segment makes the call again.
        """
        counted = (self.next_sequence, self.recorded, self.round, self._interrupted_sequence, self._stopped_at)
        self._in_transaction, self._after_commit = True, None
        try:
            with db_transaction.atomic():
                answer = body()
        except BaseException:
            self.next_sequence, self.recorded, self.round, self._interrupted_sequence, self._stopped_at = counted
            raise
        finally:
            self._in_transaction = False
        stop, self._after_commit = self._after_commit, None
        if stop is not None:
            raise stop
        return answer

    def ended(self) -> None:
        """The segment is over: a shutdown of this process has nothing more to hand back for it.
        (Its token could outlive it in a reference cycle; the set must not wait for the GC.)
        A reservation still held (its call never ran) is given back."""
        self.spend.release()
        with _handing_back_lock:
            _queued_tokens.discard(self.token)

    def before_call(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Right before a model call: reserve its worst case against the shared budgets; one that
        has no room stops the run (``budget_exhausted``) before the call starts."""
        refused = self.spend.reserve(messages)
        if refused is not None:
            spend.stop(self.run_id, refused)
            raise RunCancellationRequested(boundary_sequence=self.last_sequence)

    def before_start(self, waits: bool = True) -> None:
        """Right before a model call or tool starts: after a boundary that could not renew the
        lease, read the row again, and stop if the run was cancelled or lost meanwhile. Then, if
        the call may wait, give the thread's connection back (``db.release_connection``): the
        call holds none. An instant call (a tool or a provider marked so) keeps it: giving it
        back and taking one again would cost more than the call."""
        if self._recheck:
            renewed = _retried(lambda: store.renew(self.run_id, self.owner))
            if renewed is not Lease.UNKNOWN:  # a store that cannot be reached never fabricates a cancel
                self._recheck = False
                if self._cancelled_while_ours(renewed):
                    raise RunCancellationRequested(boundary_sequence=self.last_sequence)
        if waits:
            release_connection()  # the call about to start may take minutes: hold no connection meanwhile

    def delta(self, round_: int, text: str) -> None:
        """Publish a piece of the answer a model call is streaming (never recorded): to every
        watcher of the run (``deltas.publisher``) and to this segment's ``on_delta``."""
        if round_ != self._delta_round:
            self._delta_round, self._delta_offset = round_, 0
        data = {"run_id": str(self.run_id), "round": round_, "text": text, "offset": self._delta_offset}
        self._delta_offset += len(text)
        publisher.publish(data)
        self._observe(data)

    def progress(self, round_: int, call: ToolCall, value: float, total: float | None, message: str | None) -> None:
        """Publish how far a tool call got (never recorded here): to every watcher of the run
        and to this segment's ``on_delta``, as a delta of kind ``progress``."""
        data: dict[str, Any] = {
            "run_id": str(self.run_id),
            "kind": "progress",
            "round": round_,
            "call_id": call.id,
            "name": call.name,
            "progress": value,
            "total": total,
            "message": str(message)[:PROGRESS_MESSAGE_CHARS] if message else None,
        }
        publisher.publish_progress(data)
        self._observe(data)

    def _observe(self, data: dict[str, Any]) -> None:
        """Hand a delta (or a progress report) to this segment's ``on_delta``; its failure never stops the run."""
        if self.on_delta is None:
            return
        try:
            self.on_delta(data)
        except Exception:
            logger.exception("delta observer failed for run %s; the run goes on", self.run_id)

    def before_effect(self, call: ToolCall) -> None:
        """Stamp the write fence right before a non-idempotent tool starts (with a renewal)."""
        self.token.shield(True)  # a shutdown must not cut a write short: it hands back at the boundary
        if self.token.handing_back:  # tripped just before the shield: hand back before the write starts
            raise SegmentInterrupted()
        renewed = store.renew(
            self.run_id, self.owner, effect={"call": call.as_dict(), "at": timezone.now().isoformat()}
        )
        if self._cancelled_while_ours(renewed):
            raise RunCancellationRequested(boundary_sequence=self.last_sequence)
        self._effect_stamped = renewed is not Lease.NOT_HELD
        release_connection()

    def _cancelled_while_ours(self, lease: Lease) -> bool:
        """After a boundary write answered ``lease``: ``True`` when the run was cancelled while
        ours; raises ``RunLeaseLost`` when it is not ours any more; ``False`` otherwise (held,
        or unknown: never a fabricated cancel)."""
        if lease is not Lease.NOT_HELD:
            return False
        verdict = store.why_not_held(self.run_id, self.owner)
        if verdict is Lease.LOST:
            logger.warning("run %s: lease lost by %s; stopping without writing", self.run_id, self.owner)
            raise RunLeaseLost()
        return verdict is Lease.CANCELLED

    def _notify(self, data: dict[str, Any]) -> None:
        if self.on_step is None:
            return
        try:
            self.on_step(data)
        except Exception:
            logger.exception("step observer failed for run %s; the run goes on", self.run_id)

    def acknowledge_cancel(self) -> AgentRunEvent | None:
        """Record that this segment stopped for a cancel (once per run) and tell the observer;
        returns the ``cancelled`` step, or ``None`` when the stop was already acknowledged."""
        acknowledged = _retried(
            lambda: store.acknowledge_cancel(
                self.run_id,
                sequence=self.next_sequence,
                round=self.round,
                iterations=self.iterations,
                usage=self.usage,
                owner=self.owner,
                interrupted_sequence=self._interrupted_sequence,
                stopped_at=self._stopped_at,
            ),
            on_error=True,
        )
        event: AgentRunEvent | None = acknowledged.data.get("event")
        if event is not None:
            self.next_sequence += 1
            self.recorded += 1
            observe.cancel_acknowledged(self, event)
            self._notify(event_dict(event))
        return event


def _timed_record(
    run_id: uuid.UUID, owner: str, sequence: int, step: Step, created_at: datetime, charge: Charge | None
) -> Lease:
    """``store.record_step``, its duration (raised or not) to ``nrllm_boundary_write_seconds``:
    one ``perf_counter`` pair, the boundary pays nothing more."""
    started = time.perf_counter()
    try:
        return store.record_step(run_id, owner, sequence, step, created_at, charge)
    finally:
        observe.boundary_written(time.perf_counter() - started)


def _recorded_here(run_id: uuid.UUID, sequence: int, step: Step, created_at: datetime) -> bool:
    """Whether the step stored at ``sequence`` is this one (its kind and its own timestamp)."""
    return AgentRunEvent.objects.filter(
        run_id=run_id, sequence=sequence, kind=step.kind.value, created_at=created_at
    ).exists()


def _retried(attempt: Callable[[], T], *, on_error: bool = False) -> T:
    """``attempt()``, tried again after ``RETRY_PAUSES`` while it answers ``Lease.UNKNOWN``
    ("the store failed") or, with ``on_error``, raises a ``DatabaseError`` other than an
    integrity error; while the failure is the connection's own (found broken), for up to
    ``db.reconnect_seconds()``, every ``RECONNECT_PAUSE``: a storm of terminated backends
    is ridden out on fresh connections, and the run goes on as soon as it is over.

    Returns the last answer, or raises the last error. A connection found broken is closed
    first (outside a transaction), so that the next try opens a fresh one.
    """
    deadline = 0.0  # set at the first failure: the step path pays nothing for it
    tries = 0
    while True:
        failure: DatabaseError | None = None
        result = None
        try:
            result = attempt()
            if result is not Lease.UNKNOWN:
                return result
        except IntegrityError:
            raise
        except DatabaseError as exc:
            if not on_error:
                raise
            failure = exc
        if not tries:
            deadline = time.monotonic() + reconnect_seconds()
        lost = not connection.in_atomic_block and (connection.connection is None or not connection.is_usable())
        if lost:
            drop_connection()
        pause = RETRY_PAUSES[tries] if tries < len(RETRY_PAUSES) else (RECONNECT_PAUSE if lost else None)
        if pause is None or (tries >= len(RETRY_PAUSES) and time.monotonic() + pause > deadline):
            if failure is not None:
                raise failure
            return cast(T, result)
        tries += 1
        time.sleep(pause)
