"""Push: one listening connection per process wakes every watcher of a run.

Watchers (the browser stream, ``agent_events --follow``, ``agent_run --queued --follow``)
subscribe to a run here instead of polling its stored stream.

- On PostgreSQL the process's ONE listening connection (the cancel watcher's, in
  ``interrupts.py``, which this hub taps) also LISTENs on ``nrllm_step`` (a new step,
  ``<run id>:<sequence>``, or a run settling, ``<run id>:s``; triggers of migration
  ``0003_push_step_notify``) and ``nrllm_delta`` (the model's words as they are written,
  ``deltas.py``); the hub sees ``nrllm_cancel`` too. Steps and cancels are sent inside the
  writing transaction, so they arrive after COMMIT.
- For a run somebody watches, the hub reads the new steps and the run's status ONCE, on its
  own connection, into a small per-run *feed*, and wakes the run's watchers; each takes what
  it has not seen from the feed. A watcher that is behind the feed (it just connected, it
  resumed from an old ``Last-Event-ID``, the listener reconnected) reads the stored stream
  itself, once, then releases its connection. The stored stream stays the truth; the feed is
  a shared read of it.
- So a process holds two connections for any number of watchers (the listening one and the
  hub's reading one, both on the listener's thread), an idle watcher costs no query, and a
  step reaches every watcher after one read.
- Without PostgreSQL (SQLite), with ``STREAM_PUSH`` off, or while the listening connection is
  lost, ``Watch.pushed`` is false and watchers poll the stored stream every
  ``STREAM_POLL_SECONDS`` as before. Deltas of runs executed by this very process still reach
  its watchers in-process.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError, connections

from .conf import app_settings
from .interrupts import CHANNEL as CANCEL_CHANNEL
from .interrupts import watcher
from .models import AgentRun
from .presenters import event_dict, final_event_name, run_status_dict, stream_finished

logger = logging.getLogger(__name__)

STEP_CHANNEL = "nrllm_step"
DELTA_CHANNEL = "nrllm_delta"
FEED_KEEP = 256  # steps a feed keeps for watchers a little behind; further behind, they read
DELTA_BACKLOG = 512  # deltas a slow watcher may have pending; older ones are dropped (lossy by design)
BATCH = 500  # steps read per query

Final = tuple[str, dict[str, Any] | None]  # (event name, run status) — ("", None): the run is gone


class StepData(dict):
    """A step dict (``presenters.step_dict`` shape) that is encoded once: the feed hands the
    same object to every watcher of the run, so hundreds of streams share one encoding."""

    _encoded: str | None = None

    def encoded(self, encode: Callable[[dict[str, Any]], str]) -> str:
        """``encode(self)``, computed by the first watcher that asks (all use one encoder)."""
        if self._encoded is None:
            self._encoded = encode(self)
        return self._encoded


def read_stream(run_id: str, after: int) -> tuple[list[dict[str, Any]], Final | None]:
    """The steps after ``after`` and, when nothing more will be appended, the final event.

    The status is read *before* the steps: a run seen finished has every step committed
    already, so the read that follows misses none of them.
    """
    from . import store

    run = AgentRun.objects.select_related("cancelled_by").filter(pk=run_id).first()
    if run is None:  # deleted while watched: nothing more will come
        return [], ("", None)
    finished = stream_finished(run)
    steps: list[dict[str, Any]] = []
    while True:
        batch = [StepData(event_dict(e)) for e in store.events(run_id, after=after, limit=BATCH)]
        steps.extend(batch)
        if batch:
            after = batch[-1]["sequence"]
        if len(batch) < BATCH:
            break
    final = (final_event_name(run.status) or run.status, run_status_dict(run)) if finished else None
    return steps, final


class Subscription:
    """One watcher's mailbox: "something changed", "read yourself", and pending deltas.

    Filled by the hub's thread (or an in-process publisher), emptied by the watcher; wakes a
    thread blocked in ``wait`` or a coroutine in ``wait_async`` (``loop`` given).
    """

    def __init__(self, run_id: str, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.run_id = run_id
        self._lock = threading.Lock()
        self._changed = False
        self._resync = True  # the first look reads the stored stream
        self._deltas: deque[dict[str, Any]] = deque(maxlen=DELTA_BACKLOG)
        self._event = threading.Event()
        self._loop = loop
        self._aevent = asyncio.Event() if loop is not None else None

    def changed(self, resync: bool = False) -> None:
        with self._lock:
            self._changed = True
            self._resync = self._resync or resync
            self._signal()

    def delta(self, delta: dict[str, Any]) -> None:
        with self._lock:
            self._deltas.append(delta)
            self._signal()

    def _signal(self) -> None:
        self._event.set()
        if self._loop is not None and self._aevent is not None:
            try:
                self._loop.call_soon_threadsafe(self._aevent.set)
            except RuntimeError:  # the loop is closed: the stream is gone
                pass

    def take(self) -> tuple[bool, bool, list[dict[str, Any]]]:
        """``(changed, resync, deltas)`` since the last take; empties the mailbox."""
        with self._lock:
            taken = (self._changed, self._resync, list(self._deltas))
            self._changed = self._resync = False
            self._deltas.clear()
            self._event.clear()
        return taken

    def wait(self, timeout: float) -> bool:
        """Block until something arrives or ``timeout`` seconds pass."""
        return self._event.wait(max(0.0, timeout))

    async def wait_async(self, timeout: float) -> bool:
        """``wait`` for the event loop the subscription was made on."""
        assert self._aevent is not None, "subscribe with loop= to wait asynchronously"
        try:
            await asyncio.wait_for(self._aevent.wait(), max(0.0, timeout))
            return True
        except TimeoutError:
            return False
        finally:
            self._aevent.clear()


@dataclass
class Feed:
    """What the hub has read of one watched run: steps ``(first, last]`` and the final event."""

    first: int | None = None
    last: int | None = None
    steps: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=FEED_KEEP))
    final: Final | None = None

    def add(self, steps: list[dict[str, Any]]) -> None:
        for step in steps:
            if len(self.steps) == self.steps.maxlen:
                self.first = self.steps[0]["sequence"]  # the oldest kept falls out of coverage
            self.steps.append(step)
            self.last = step["sequence"]

    def since(self, after: int) -> tuple[list[dict[str, Any]], Final | None] | None:
        """Steps after ``after`` and the final event, or ``None`` when the feed cannot tell
        (it does not reach back to ``after``): the watcher reads the stored stream instead."""
        if self.first is None or self.last is None or after < self.first:
            return None
        steps = [s for s in self.steps if s["sequence"] > after]
        return steps, self.final


class Hub:
    """This process's listener and router (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subs: dict[str, set[Subscription]] = {}
        self._feeds: dict[str, Feed] = {}
        self._pid = os.getpid()
        self.counts = {"connects": 0, "notifies": 0, "refreshes": 0, "deltas": 0}

    @staticmethod
    def available() -> bool:
        """Whether this process can be pushed to (PostgreSQL and ``STREAM_PUSH`` on)."""
        return connections["default"].vendor == "postgresql" and bool(app_settings.STREAM_PUSH)

    # --- watchers -----------------------------------------------------------------------------
    def subscribe(self, run_id: Any, loop: asyncio.AbstractEventLoop | None = None) -> Subscription:
        if self._pid != os.getpid():  # forked: the parent's thread is not here
            self.__init__()  # type: ignore[misc]
        sub = Subscription(str(run_id), loop)
        with self._lock:
            self._subs.setdefault(sub.run_id, set()).add(sub)
        if self.available():
            self._ensure_running()
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            subs = self._subs.get(sub.run_id)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self._subs[sub.run_id]
                    self._feeds.pop(sub.run_id, None)

    def watchers(self) -> int:
        with self._lock:
            return sum(len(s) for s in self._subs.values())

    def feed_since(self, run_id: str, after: int) -> tuple[list[dict[str, Any]], Final | None] | None:
        with self._lock:
            feed = self._feeds.get(run_id)
            return feed.since(after) if feed is not None else None

    def deliver_delta(self, delta: dict[str, Any]) -> None:
        """Hand a delta to this process's watchers of its run (from NOTIFY, or in-process)."""
        with self._lock:
            subs = list(self._subs.get(str(delta.get("run_id")), ()))
        for sub in subs:
            sub.delta(delta)
        self.counts["deltas"] += bool(subs)

    def _wake_all(self, resync: bool) -> None:
        with self._lock:
            subs = [s for group in self._subs.values() for s in group]
            if resync:
                self._feeds.clear()
        for sub in subs:
            sub.changed(resync=resync)

    # --- the shared listening connection ---------------------------------------------------------
    # The process's one LISTEN connection is the cancel watcher's (interrupts.py): this hub taps
    # it for nrllm_step, nrllm_delta and nrllm_cancel, and runs on its thread.
    def pushing(self) -> bool:
        """Whether watchers are pushed to right now (else they poll)."""
        return self.available() and watcher.listening.is_set()

    @property
    def listening(self) -> threading.Event:
        """Set while the process's listening connection is up."""
        return watcher.listening

    @property
    def listener_pid(self) -> int | None:
        return watcher.listener_pid

    def _ensure_running(self) -> None:
        watcher.ensure_running()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the listening thread (tests); the next subscription starts it again."""
        watcher.stop(timeout)

    def _on_state(self, up: bool) -> None:
        if up:
            self.counts["connects"] += 1
        else:  # this thread's reading connection goes too; the next refresh opens a fresh one
            connections["default"].close()
        # Up: whatever committed before LISTEN took effect sent nothing; down: watchers poll.
        self._wake_all(resync=True)

    def _dispatch(self, notifies: Iterable[Any]) -> None:
        if not self.available():
            return
        touched: dict[str, int | None] = {}  # run id -> lowest new sequence (None: status only)
        with self._lock:
            watched = set(self._subs)
        for notify in notifies:
            self.counts["notifies"] += 1
            if notify.channel == DELTA_CHANNEL:
                run_id, _, body = notify.payload.partition(" ")
                if run_id in watched:
                    try:
                        self.deliver_delta(json.loads(body))
                    except ValueError:
                        logger.warning("malformed delta notification ignored")
                continue
            run_id, _, tail = notify.payload.partition(":")
            if run_id not in watched:
                continue
            sequence = int(tail) if tail.isdigit() else None
            if run_id not in touched or touched[run_id] is None:
                touched[run_id] = sequence
            elif sequence is not None:
                touched[run_id] = min(sequence, touched[run_id])  # type: ignore[type-var]
        for run_id, lowest in touched.items():
            self._refresh(run_id, lowest)

    def _refresh(self, run_id: str, lowest: int | None) -> None:
        """Read the run's new steps and status once, into its feed; wake its watchers."""
        from . import store

        self.counts["refreshes"] += 1
        with self._lock:
            feed = self._feeds.get(run_id) or Feed()
        try:
            if feed.last is not None:
                after = feed.last
            elif lowest is not None:
                after = lowest - 1
            else:  # a status change on a run the feed knows nothing of: start at its end
                after = store.next_sequence(run_id) - 1
            steps, final = read_stream(run_id, after)
        except DatabaseError as exc:  # the watchers read themselves
            logger.warning("push read of run %s failed (%s)", run_id, type(exc).__name__)
            connections["default"].close()
            with self._lock:
                self._feeds.pop(run_id, None)
                subs = list(self._subs.get(run_id, ()))
            for sub in subs:
                sub.changed(resync=True)
            return
        with self._lock:
            if run_id not in self._subs:
                return
            if feed.first is None:
                feed.first = feed.last = after
            feed.add(steps)
            feed.final = final
            self._feeds[run_id] = feed
            subs = list(self._subs.get(run_id, ()))
        for sub in subs:
            sub.changed()


hub = Hub()
"""This process's hub."""

watcher.tap("push", (STEP_CHANNEL, CANCEL_CHANNEL, DELTA_CHANNEL), hub._dispatch, hub._on_state)
