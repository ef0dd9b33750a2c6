"""A watcher's view of one run: the steps it has, how it learns of more, the deltas meanwhile.

Shared by the browser stream and the CLI followers. ``update()`` returns what is new since the
last call; ``wait()`` / ``wait_async()`` block until something may be new. Pushed (see
``push.py``), a watcher reads the stored stream itself only to catch up, takes everything
else from its run's shared feed, and releases its database connection after each read; so
an idle watcher costs no query and holds no connection. Not pushed (SQLite, ``STREAM_PUSH``
off, the listener lost), it reads the stored stream at every poll, as followers always did.

Deltas are passed on in order, merged when contiguous, and dropped once the ``llm`` step of
their round (or a later one) was seen: the recorded step is the truth and replaces them.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async

from ..conf import app_settings
from ..store.db import release_connection
from .push import REGISTER_TIMEOUT, Final, Hub, hub, read_stream

# Watchers of a process reading the stored stream at once (each on a connection it then
# closes): a burst of catch-ups (many streams opening, a listener reconnecting) waits here
# instead of opening a connection each.
READ_CONCURRENCY = 8
_reading = threading.BoundedSemaphore(READ_CONCURRENCY)


@dataclass
class Update:
    """What a watcher learnt since its last look."""

    steps: list[dict[str, Any]] = field(default_factory=list)
    deltas: list[dict[str, Any]] = field(default_factory=list)
    progress: list[dict[str, Any]] = field(default_factory=list)  # tool calls' latest reports
    final: Final | None = None  # set once nothing more will be appended

    @property
    def finished(self) -> bool:
        return self.final is not None


def latest_progress(reports: list[dict[str, Any]], done: set[str]) -> list[dict[str, Any]]:
    """The last report of each call still in flight (a recorded tool step replaces its reports)."""
    latest: dict[str, dict[str, Any]] = {}
    for report in reports:
        if str(report.get("call_id")) not in done:
            latest[str(report.get("call_id"))] = report
    return list(latest.values())


def merge_deltas(deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Contiguous pieces of one round become one delta (fewer frames for the same text)."""
    merged: list[dict[str, Any]] = []
    for delta in deltas:
        prev = merged[-1] if merged else None
        if (
            prev is not None
            and prev["round"] == delta["round"]
            and prev["offset"] + len(prev["text"]) == delta["offset"]
        ):
            merged[-1] = {**prev, "text": prev["text"] + delta["text"]}
        else:
            merged.append(dict(delta))
    return merged


class Watch:
    """One watcher of one run, from sequence ``after`` (exclusive). Close it when done."""

    def __init__(
        self,
        run_id: Any,
        after: int = -1,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        via: Hub = hub,
        poll: float | None = None,
    ) -> None:
        self.run_id = str(run_id)
        self.last = after
        self.hub = via
        self.sub = via.subscribe(self.run_id, loop)
        self.reads = 0  # stored-stream reads this watcher made itself
        self.poll = float(app_settings.STREAM_POLL_SECONDS if poll is None else poll)
        self._next_poll = 0.0  # not pushed: when the next read is due (deltas wake it sooner)
        self._answered_round = -1  # the highest round whose llm step was seen
        self._done_calls: set[str] = set()  # tool calls whose step was seen (their progress is over)
        self._registered = False  # its hub listens to the run and counts this process in (or gave up)

    @property
    def pushed(self) -> bool:
        """Whether new steps are pushed now; otherwise the watcher must poll."""
        return self.hub.pushing()

    def close(self) -> None:
        self.hub.unsubscribe(self.sub)

    # --- looking ----------------------------------------------------------------------------------
    def update(self) -> Update:
        """What is new (steps read from the feed or the stored stream, deltas, the final event)."""
        read, update = self._collect()
        if read:
            self._apply(update, self._read())
        return self._finish(update)

    async def update_async(self) -> Update:
        """``update`` for an event loop: a stored-stream read runs in a worker thread of the
        loop's pool, not in the one thread that Django's ASGI handler runs sync code in
        (``thread_sensitive``): there every stream's reads and every request's view would take
        turns, and 100 polling streams were enough to keep new ones from opening."""
        read, update = self._collect()
        if read:
            self._apply(update, await sync_to_async(self._read, thread_sensitive=False)())
        return self._finish(update)

    def wait(self, timeout: float) -> bool:
        return self.sub.wait(timeout)

    async def wait_async(self, timeout: float) -> bool:
        return await self.sub.wait_async(timeout)

    # --- internals -----------------------------------------------------------------------------------
    def _collect(self) -> tuple[bool, Update]:
        """Empty the mailbox; take from the shared feed what it covers. No database work."""
        changed, resync, deltas = self.sub.take()
        update = Update(deltas=deltas)
        if not self.pushed:
            now = time.monotonic()
            if now < self._next_poll and not resync:
                return False, update  # woken by a delta between two polls
            self._next_poll = now + self.poll
            return True, update
        if resync:
            return True, update
        if changed:
            found = self.hub.feed_since(self.run_id, self.last)
            if found is None:
                return True, update  # the feed does not reach back to us: read ourselves
            self._apply(update, found)
        return False, update

    def _read(self) -> tuple[list[dict[str, Any]], Final | None]:
        pushed = self.pushed
        if pushed and not self._registered:  # read once the hub listens and is counted: no later step goes unannounced
            self._registered = self.sub.registered.wait(REGISTER_TIMEOUT) or True  # a failure waits only once
        self.reads += 1
        with _reading:
            try:
                return read_stream(uuid.UUID(self.run_id), self.last)
            finally:
                # An idle watcher holds no connection. A polling one gives its thread's back to
                # the pool (SQLite: closes it) and keeps it only without a pool, where opening
                # one at every poll would cost more than the poll.
                release_connection(idle=pushed)

    def _apply(self, update: Update, found: tuple[list[dict[str, Any]], Final | None]) -> None:
        steps, final = found
        for step in steps:
            if step["sequence"] > self.last:
                update.steps.append(step)
                self.last = step["sequence"]
                if step["kind"] == "llm":
                    self._answered_round = max(self._answered_round, step["round"])
                elif step["kind"] == "tool" and isinstance(step.get("payload"), dict):
                    self._done_calls.add(str(step["payload"].get("call_id")))
        if final is not None:
            update.final = final

    def _finish(self, update: Update) -> Update:
        if update.deltas:
            reports = [d for d in update.deltas if d.get("kind") == "progress"]
            fresh = [
                d for d in update.deltas if d.get("kind") != "progress" and d.get("round", -1) > self._answered_round
            ]
            update.deltas = merge_deltas(fresh)
            update.progress = latest_progress(reports, self._done_calls)
        return update
