"""Publishing the model's words as they are written, to every watcher of the run.

``SegmentTrace.delta`` hands each piece here. Pieces are coalesced per run and round: the
first piece after a quiet moment goes out at once (the first token is not held back), later
ones at most every ``DELTA_COALESCE_SECONDS`` (50 ms), merged. One daemon thread per process
sends them:

- on PostgreSQL as ``NOTIFY nrllm_delta, '<run id> <json>'`` on a connection of its own
  (opened on first use, closed after a quiet minute), several in one round trip; every
  process's push hub (``push.py``) receives them on the listening connection it already holds
  and hands them to its watchers of that run. A payload stays under PostgreSQL's 8,000-byte
  limit: longer text is sent in several deltas, each with its own offset;
- elsewhere (SQLite) straight to this process's watchers: a run executed by the web process
  (the playground's interactive runs, the in-process executor) is seen live there.

Deltas are lossy by design (a full buffer drops the oldest, a failed send is dropped) and
never stored: the ``llm`` step recorded afterwards is the truth. Pieces still pending when
that step is recorded are discarded (``discard``).
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

from .conf import app_settings
from .interrupts import raw_connection
from .push import DELTA_CHANNEL, hub

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


class DeltaPublisher:
    """Coalesces this process's deltas and sends them (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._pending: dict[tuple[str, int], _Pending] = {}
        self._last_sent: dict[tuple[str, int], float] = {}
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._conn: Any = None
        self._conn_used = 0.0
        self.counts = {"published": 0, "sent": 0, "dropped": 0}

    def publish(self, delta: dict[str, Any]) -> None:
        """Queue a piece ``{"run_id", "round", "text", "offset"}``; returns at once."""
        if not delta.get("text"):
            return
        if self._pid != os.getpid():  # forked (an RQ work horse): the parent's thread is not here
            self.__init__()  # type: ignore[misc]
        key = (str(delta["run_id"]), int(delta["round"]))
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

    def discard(self, run_id: Any) -> None:
        """Drop what is pending for ``run_id`` (its recorded step replaces it)."""
        run_id = str(run_id)
        with self._lock:
            for key in [k for k in self._pending if k[0] == run_id]:
                del self._pending[key]

    def flush(self, timeout: float = 2.0) -> bool:
        """Wait until nothing is pending (tests, benchmarks)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._pending:
                    return True
            self._wake.set()
            time.sleep(0.005)
        return False

    @staticmethod
    def _window() -> float:
        return max(0.0, app_settings.DELTA_COALESCE_SECONDS)

    def _ensure_running(self) -> None:  # under self._lock
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="nrllm-delta-publisher", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            now = time.monotonic()
            with self._lock:
                due = [p for p in self._pending.values() if p.due <= now]
                for p in due:
                    del self._pending[(p.run_id, p.round)]
                    self._last_sent[(p.run_id, p.round)] = now
                wait = min((p.due for p in self._pending.values()), default=now + IDLE_CLOSE_SECONDS) - now
                if len(self._last_sent) > 1000:  # forget rounds quiet for longer than a window
                    horizon = now - self._window()
                    self._last_sent = {k: t for k, t in self._last_sent.items() if t > horizon}
            if due:
                self._send([{"run_id": p.run_id, "round": p.round, "text": p.text, "offset": p.offset} for p in due])
                continue
            if not self._wake.wait(max(0.0, wait)):
                self._close_if_idle()
            self._wake.clear()

    def _send(self, deltas: list[dict[str, Any]]) -> None:
        pieces = [piece for delta in deltas for piece in chunks(delta)]
        if connections["default"].vendor != "postgresql":
            for piece in pieces:
                hub.deliver_delta(piece)
            self.counts["sent"] += len(pieces)
            return
        rows = [
            (DELTA_CHANNEL, f"{p['run_id']} {json.dumps(p, ensure_ascii=False, separators=(',', ':'))}") for p in pieces
        ]
        try:
            if self._conn is None or self._conn.closed:
                self._conn = raw_connection("nrllm-delta-publisher")
            with self._conn.cursor() as cursor:
                cursor.executemany("SELECT pg_notify(%s, %s)", rows)
            self._conn_used = time.monotonic()
            self.counts["sent"] += len(rows)
        except Exception as exc:  # lossy by design: the recorded step is the truth
            self.counts["dropped"] += len(rows)
            logger.warning("could not publish %d delta(s) (%s); dropped", len(rows), type(exc).__name__)
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


publisher = DeltaPublisher()
"""This process's publisher."""
