"""The process's one publisher: the steps of watched runs and the model's words as they are written.

Nothing is announced from inside a boundary transaction (PostgreSQL serialises the commits of all
transactions that notified, cluster-wide). Instead the segment hands a committed step of a watched
run here, and ``SegmentTrace.delta`` each piece of a streaming answer; one daemon thread sends
everything due in one notifying commit at most every ``PUSH_INTERVAL_SECONDS``, to each run's own
channel. Deltas are coalesced per run and round, lossy by design and never stored; on SQLite they
go straight to this process's watchers.

Why, the rates, the payload limit and what a lost notice costs: docs/internals.md ("The
publisher").
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from django.db import connections

from ..conf import app_settings
from .interrupts import watcher
from .listener import Client, Connection, Notify, raw_connection
from .push import WATCH_CHANNEL, hub, run_channel

logger = logging.getLogger(__name__)

CHUNK_CHARS = 1000  # at most 4 bytes each in UTF-8 (6 escaped): far below NOTIFY's 8,000 bytes
IDLE_CLOSE_SECONDS = 60.0


@dataclass
class _Pending:
    run_id: str
    round: int
    offset: int
    text: str
    due: float


def chunks(delta: dict[str, Any]) -> list[dict[str, Any]]:
    """A delta cut into pieces of at most ``CHUNK_CHARS`` characters, offsets adjusted."""
    text = delta["text"]
    if len(text) <= CHUNK_CHARS:
        return [delta]
    return [
        {**delta, "text": text[i : i + CHUNK_CHARS], "offset": delta["offset"] + i}
        for i in range(0, len(text), CHUNK_CHARS)
    ]


class Publisher(Client):
    """Coalesces this process's step notices and deltas and sends them (see the module docstring).

    A client of the listener only to hear ``nrllm_watch``; it sends on a connection of its own."""

    channels = (WATCH_CHANNEL,)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._pending: dict[tuple[str, int], _Pending] = {}
        self._progress: dict[tuple[str, str], tuple[dict[str, Any], float]] = {}  # latest per call, due
        self._last_sent: dict[tuple[str, int], float] = {}
        self._steps: dict[str, int] = {}  # watched run id -> its lowest sequence not yet announced
        self._watched: set[str] = set()  # runs executed here that somebody watches (deltas go out)
        self._next_send = 0.0  # the rate bound: no notifying commit before this (monotonic)
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._conn: Connection | None = None
        self._conn_used = 0.0
        self.counts = {"published": 0, "sent": 0, "dropped": 0, "steps": 0, "commits": 0}

    def _forked(self) -> None:
        if self._pid != os.getpid():  # forked (an RQ work horse): the parent's thread is not here
            with _FORK_LOCK:  # the run's thread and the listener's may both be first
                if self._pid != os.getpid():
                    self.__init__()  # type: ignore[misc]

    # --- steps ----------------------------------------------------------------------------------
    def boundary(self, run_id: Any, sequence: int, watched: bool) -> None:
        """A boundary of ``run_id`` committed ``sequence``; ``watched``: some process watches it.
        Watched, the step is announced (soon, with whatever else is pending); not, its deltas
        stop going out. No database work here."""
        if not watched and not self._watched:  # the common case: nothing to touch, nothing to reset
            return
        run_id = str(run_id)
        self._forked()  # before any state is touched: a fork starts from a fresh publisher
        if not watched:
            with self._lock:
                self._watched.discard(run_id)
            return
        with self._lock:
            self._watched.add(run_id)
            self._steps[run_id] = min(sequence, self._steps.get(run_id, sequence))
            self.counts["steps"] += 1
            self._ensure_running()
        self._wake.set()

    def notified(self, conn: Connection, batch: list[Notify]) -> None:
        self._on_watch(batch)

    def _on_watch(self, batch: list[Notify]) -> None:
        """``nrllm_watch`` (on the listener's thread): a watcher announced itself; if this
        process executes the run, its deltas go out from now on, not from its next boundary."""
        announced = {n.payload for n in batch if n.channel == WATCH_CHANNEL}
        if not announced:
            return
        # In a forked work horse the first news may come before its first delta: reset now, or
        # that delta's reset would forget the watch just heard of.
        self._forked()
        mine = announced & {str(run_id) for run_id in watcher.watched()}
        if mine:
            with self._lock:
                self._watched |= mine

    # --- deltas ---------------------------------------------------------------------------------
    def publish(self, delta: dict[str, Any]) -> None:
        """Queue a piece ``{"run_id", "round", "text", "offset"}``; returns at once. On
        PostgreSQL it is dropped while nobody watches the run."""
        if not delta.get("text"):
            return
        self._forked()
        key = (str(delta["run_id"]), int(delta["round"]))
        if key[0] not in self._watched and connections["default"].vendor == "postgresql":
            return
        now = time.monotonic()
        with self._lock:
            self.counts["published"] += 1
            pending = self._pending.get(key)
            if pending is not None and pending.offset + len(pending.text) == delta["offset"]:
                pending.text += delta["text"]
            else:
                due = max(now, self._last_sent.get(key, 0.0) + self._window())
                self._pending[key] = _Pending(key[0], key[1], int(delta["offset"]), delta["text"], due)
            self._ensure_running()
        self._wake.set()

    def publish_progress(self, progress: dict[str, Any]) -> None:
        """Queue a tool call's progress (``{"run_id", "kind": "progress", "call_id", ...}``),
        replacing one of the same call still pending; dropped while nobody watches the run."""
        self._forked()
        key = (str(progress["run_id"]), str(progress.get("call_id")))
        if key[0] not in self._watched and connections["default"].vendor == "postgresql":
            return
        now = time.monotonic()
        with self._lock:
            self.counts["published"] += 1
            waiting = self._progress.get(key)
            last = self._last_sent.get((key[0], -1), 0.0)
            due = waiting[1] if waiting is not None else max(now, last + self._window())
            self._progress[key] = (progress, due)
            self._ensure_running()
        self._wake.set()

    def discard(self, run_id: Any) -> None:
        """Drop what is pending for ``run_id`` (its recorded step replaces it)."""
        if not self._pending:  # after every model answer: mostly nothing is
            return
        run_id = str(run_id)
        with self._lock:
            for key in [k for k in self._pending if k[0] == run_id]:
                del self._pending[key]

    def flush(self, timeout: float = 2.0) -> bool:
        """Wait until nothing is pending (tests, benchmarks)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._pending and not self._steps and not self._progress:
                    return True
            self._wake.set()
            time.sleep(0.005)
        return False

    @staticmethod
    def _window() -> float:
        return max(0.0, float(app_settings.DELTA_COALESCE_SECONDS))

    @staticmethod
    def _interval() -> float:
        return max(0.0, float(app_settings.PUSH_INTERVAL_SECONDS))

    def _ensure_running(self) -> None:  # under self._lock
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="nrllm-delta-publisher", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            now = time.monotonic()
            with self._lock:
                if now >= self._next_send:
                    due = [p for p in self._pending.values() if p.due <= now]
                    for p in due:
                        del self._pending[(p.run_id, p.round)]
                        self._last_sent[(p.run_id, p.round)] = now
                    steps, self._steps = self._steps, {}
                    reports = [report for report, when in self._progress.values() if when <= now]
                    for report in reports:
                        del self._progress[(str(report["run_id"]), str(report.get("call_id")))]
                        self._last_sent[(str(report["run_id"]), -1)] = now
                else:
                    due, steps, reports = [], {}, []
                soonest = min((p.due for p in self._pending.values()), default=now + IDLE_CLOSE_SECONDS)
                soonest = min([soonest, *(when for _, when in self._progress.values())])
                if self._steps:
                    soonest = now
                wait = max(soonest, self._next_send) - now
                if len(self._last_sent) > 1000:  # forget rounds quiet for longer than a window
                    horizon = now - self._window()
                    self._last_sent = {k: t for k, t in self._last_sent.items() if t > horizon}
            if due or steps or reports:
                pieces = [{"run_id": p.run_id, "round": p.round, "text": p.text, "offset": p.offset} for p in due]
                self._send(pieces + reports, steps)
                continue
            if not self._wake.wait(max(0.0, wait)):
                self._close_if_idle()
            self._wake.clear()

    def _send(self, deltas: list[dict[str, Any]], steps: dict[str, int]) -> None:
        pieces = [piece for delta in deltas for piece in (chunks(delta) if "text" in delta else [delta])]
        if connections["default"].vendor != "postgresql":
            for piece in pieces:
                hub.deliver_delta(piece)
            self.counts["sent"] += len(pieces)
            return
        channels = [run_channel(run_id) for run_id in steps]
        payloads = [f"{run_id}:{sequence}" for run_id, sequence in steps.items()]
        for p in pieces:
            channels.append(run_channel(p["run_id"]))
            payloads.append(json.dumps(p, ensure_ascii=False, separators=(",", ":")))
        try:
            if self._conn is None or self._conn.closed:
                self._conn = raw_connection("nrllm-publisher")
                # Lossy by design, so no commit here waits for the WAL flush: the notify lock,
                # which every notifying commit of the cluster takes in turn, is held that much
                # less. (The steps announced were committed durably by their own transactions.)
                self._conn.execute("SET synchronous_commit = off")
            # One statement, one transaction: one notifying commit for everything that is due.
            self._conn.execute(_NOTIFY_SQL, [channels, payloads])
            self._conn_used = time.monotonic()
            self._next_send = self._conn_used + self._interval()
            self.counts["sent"] += len(pieces)
            self.counts["commits"] += 1
        except Exception as exc:  # lossy by design: the recorded step is the truth
            self.counts["dropped"] += len(pieces)
            logger.warning("could not publish %d notice(s) (%s); dropped", len(channels), type(exc).__name__)
            self._close()

    def stop(self) -> None:
        """Close the publishing connection (tests); the next delta opens it again."""
        with self._lock:
            self._conn_used = 0.0
        self._wake.set()
        self._close()

    def _close_if_idle(self) -> None:
        if self._conn is not None and time.monotonic() - self._conn_used >= IDLE_CLOSE_SECONDS:
            self._close()

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass


_FORK_LOCK = threading.Lock()
_NOTIFY_SQL = "SELECT count(pg_notify(c, p)) FROM unnest(%s::text[], %s::text[]) AS t(c, p)"

publisher = Publisher()
"""This process's publisher."""
