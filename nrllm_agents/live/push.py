"""Push: one listening connection per process wakes every watcher of a run.

Watchers (the browser stream, ``agent_events --follow``, ``agent_run --queued --follow``)
subscribe to a run here instead of polling its stored stream. On PostgreSQL the hub, a client of
``listener.py``, LISTENs on the run's own channel and counts itself in the run's row
(``agentrun.watchers``) before any watcher reads, so only watched runs announce anything; it reads
new steps once per run into a shared *feed* and wakes the run's watchers. A watcher behind the feed
reads the stored stream itself: the stored stream stays the truth. On SQLite, with
``STREAM_PUSH`` off or while the listener is down, ``Watch.pushed`` is false and watchers poll.

The channels, the watcher count's race with the boundary and the costs: docs/internals.md
("Push to watchers").
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError, connections

from .. import store
from ..conf import app_settings
from ..models import AgentRun
from ..presentation.presenters import event_dict, final_event_name, run_status_dict, stream_finished
from .interrupts import CHANNEL as CANCEL_CHANNEL
from .listener import Client, Connection, Notify, listener

logger = logging.getLogger(__name__)

RUN_CHANNEL_PREFIX = "nrllm_run_"
WATCH_CHANNEL = "nrllm_watch"  # payload: a run id that a process started watching
REGISTER_TIMEOUT = 2.0  # a watcher's first read waits at most this long for its hub to count it
LOCK_TIMEOUT = "SET LOCAL lock_timeout = '1s'"
LOCK_NOT_AVAILABLE = "55P03"  # the SQLSTATE of a lock_timeout
FEED_KEEP = 256  # steps a feed keeps for watchers a little behind; further behind, they read
DELTA_BACKLOG = 512  # deltas a slow watcher may have pending; older ones are dropped (lossy by design)
BATCH = 500  # steps read per query

Final = tuple[str, dict[str, Any] | None]  # (event name, run status) — ("", None): the run is gone


def run_channel(run_id: Any) -> str:
    """The run's own channel: ``nrllm_run_`` and its id in hex (42 characters)."""
    return RUN_CHANNEL_PREFIX + str(run_id).replace("-", "")


class StepData(dict[str, Any]):
    """A step dict (``presenters.step_dict`` shape) that is encoded once: the feed hands the
    same object to every watcher of the run, so hundreds of streams share one encoding."""

    _encoded: str | None = None

    def encoded(self, encode: Callable[[dict[str, Any]], str]) -> str:
        """``encode(self)``, computed by the first watcher that asks (all use one encoder)."""
        if self._encoded is None:
            self._encoded = encode(self)
        return self._encoded


def read_stream(run_id: uuid.UUID, after: int) -> tuple[list[dict[str, Any]], Final | None]:
    """The steps after ``after`` and, when nothing more will be appended, the final event.

    The status is read *before* the steps: a run seen finished has every step committed
    already, so the read that follows misses none of them.
    """
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
        self.registered = threading.Event()  # set once its hub listens to and counts the run

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


class Hub(Client):
    """This process's router of a run's news to its watchers: a client of the listener (see the
    module docstring). Runs are keyed by the text of their id, as channels and payloads name them."""

    channels = (CANCEL_CHANNEL,)  # and, on the same connection, the channel of each watched run

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subs: dict[str, set[Subscription]] = {}
        self._feeds: dict[str, Feed] = {}
        self._pid = os.getpid()
        self._counted: set[str] = set()  # runs whose ``watchers`` include this process
        self._listened: set[str] = set()  # runs whose channel the current connection LISTENs to
        self.counts = {"connects": 0, "notifies": 0, "refreshes": 0, "deltas": 0, "registrations": 0}

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
            known = sub.run_id in self._listened and sub.run_id in self._counted
        if known:
            sub.registered.set()
        elif self.available():
            self._ensure_running()
            listener.wake()  # the listener's thread listens to the run and counts this process in
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            subs = self._subs.get(sub.run_id)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self._subs[sub.run_id]
                    self._feeds.pop(sub.run_id, None)
                    last = True
                else:
                    last = False
            else:
                last = False
        if last and self.available():
            listener.wake()  # the listener's thread unlistens and uncounts

    # --- the listener's hooks (on its thread) ------------------------------------------------
    def connected(self, conn: Connection) -> None:
        self._register(conn, fresh=True)

    def woken(self, conn: Connection) -> None:
        self._register(conn, fresh=False)

    def notified(self, conn: Connection, batch: list[Notify]) -> None:
        self._dispatch(batch)

    def _register(self, conn: Connection, *, fresh: bool) -> None:
        """LISTEN to the runs watched here and count this process in their rows; the reverse
        for runs no longer watched. A fresh connection listens to none."""
        if not self.available():
            return
        if fresh:
            self._listened = set()
        with self._lock:
            wanted = set(self._subs)
        table = AgentRun._meta.db_table
        listen, unlisten = wanted - self._listened, self._listened - wanted
        if listen or unlisten:
            conn.execute(
                "; ".join(
                    [f"LISTEN {run_channel(r)}" for r in sorted(listen)]
                    + [f"UNLISTEN {run_channel(r)}" for r in sorted(unlisten)]
                )
            )
            self._listened = (self._listened | listen) - unlisten
        count, uncount = sorted(wanted - self._counted), sorted(self._counted - wanted)
        try:
            if count:  # announced too: a process executing one streams its deltas from now on
                with conn.transaction():
                    conn.execute(LOCK_TIMEOUT)  # the listener's thread never waits long for a row lock
                    conn.execute(f"UPDATE {table} SET watchers = watchers + 1 WHERE id = ANY(%s::uuid[])", [count])
                    conn.execute(
                        f"SELECT count(pg_notify('{WATCH_CHANNEL}', r)) FROM unnest(%s::text[]) AS t(r)", [count]
                    )
                self._counted.update(count)
                self.counts["registrations"] += len(count)
            if uncount:
                with conn.transaction():
                    conn.execute(LOCK_TIMEOUT)
                    conn.execute(
                        f"UPDATE {table} SET watchers = GREATEST(watchers - 1, 0) WHERE id = ANY(%s::uuid[])", [uncount]
                    )
                self._counted.difference_update(uncount)
        except Exception as exc:
            if getattr(exc, "sqlstate", None) != LOCK_NOT_AVAILABLE:
                raise
            # A row held for long: tried again at the next wake; meanwhile the watchers read.
            logger.warning("push: a watched run's row stayed locked; its registration is retried")
            listener.wake()
        with self._lock:
            ready = [s for r in wanted & self._listened & self._counted for s in self._subs.get(r, ())]
        for sub in ready:
            sub.registered.set()

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
    # The process's one LISTEN connection is the listener's (listener.py): the hub LISTENs there
    # on nrllm_cancel and on the channel of each run watched here, and runs on its thread.
    def pushing(self) -> bool:
        """Whether watchers are pushed to right now (else they poll)."""
        return self.available() and listener.listening.is_set()

    @property
    def listening(self) -> threading.Event:
        """Set while the process's listening connection is up."""
        return listener.listening

    @property
    def listener_pid(self) -> int | None:
        return listener.backend_pid

    def _ensure_running(self) -> None:
        listener.ensure_running()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the listening thread (tests); the next subscription starts it again."""
        listener.stop(timeout)

    def state(self, up: bool) -> None:
        if up:
            self.counts["connects"] += 1
        else:  # this thread's reading connection goes too; the next refresh opens a fresh one
            self._listened = set()
            connections["default"].close()
        # Up: whatever committed before LISTEN took effect sent nothing; down: watchers poll.
        self._wake_all(resync=True)

    def _dispatch(self, notifies: Iterable[Notify]) -> None:
        if not self.available():
            return
        touched: dict[str, int | None] = {}  # run id -> lowest new sequence (None: status only)
        with self._lock:
            watched = set(self._subs)
        for notify in notifies:
            if notify.channel == WATCH_CHANNEL:
                continue
            self.counts["notifies"] += 1
            if notify.channel.startswith(RUN_CHANNEL_PREFIX) and notify.payload.startswith("{"):
                try:
                    delta = json.loads(notify.payload)
                except ValueError:
                    logger.warning("malformed delta notification ignored")
                    continue
                if isinstance(delta, dict) and str(delta.get("run_id")) in watched:
                    self.deliver_delta(delta)
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
        self.counts["refreshes"] += 1
        with self._lock:
            feed = self._feeds.get(run_id) or Feed()
        try:
            if feed.last is not None:
                after = feed.last
            elif lowest is not None:
                after = lowest - 1
            else:  # a status change on a run the feed knows nothing of: start at its end
                after = store.next_sequence(uuid.UUID(run_id)) - 1
            steps, final = read_stream(uuid.UUID(run_id), after)
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
