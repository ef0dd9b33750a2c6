"""Cancel signals: trip the token of a segment within milliseconds of its cancel's commit.

Every process that executes runs (an RQ work horse, the in-process executor, the web process
for interactive runs, ``agent_run``) holds ONE watcher: a daemon thread that routes run ids to
the cancel tokens of the segments this process is executing.

- On PostgreSQL the thread LISTENs on ``nrllm_cancel``. A trigger (migration
  ``0003_cancel_notify``) sends the run id there whenever a row becomes ``cancelled``, inside
  the cancelling transaction, so it arrives only after that COMMIT, whichever code path
  cancelled (single, bulk, limits, anything added later).
- Without it (SQLite, the embedded default) and while the listening connection is lost, the
  thread re-reads the status of every run this process executes every
  ``CANCEL_POLL_SECONDS``, in one query.
- A cancel committed by this very process trips the tokens at once (``cancelled_here``).
- A run's deadline (``limits``) is kept here too: when it passes, the same thread makes the
  system's guarded cancel, which trips the token like any cancel, so a deadline also cuts the
  step in flight short.

The listening connection is the process's only one, and this watcher is its one owner: the
live stream (``push.py``) and the publisher (``deltas.py``) are its clients (``tap``). A client
LISTENs on channels of its own and runs its statements on that connection, on this thread,
when it connects and whenever it asks (``wake``), so a process that both executes runs and
serves watchers listens once.

A lost connection is retried after 50 ms, then after twice as long each time it fails again
(at most 5 s); once connected again the delay starts over at 50 ms. While it is down the
runs this process executes are polled every ``DOWN_POLL_SECONDS`` (0.1 s), not every
``CANCEL_POLL_SECONDS``: a cancel then still stops a step within about 100 ms.

The row is the truth; the signal only makes the stop sooner. A notification trips nothing
until the row reads ``cancelled``, so a stray or forged ``NOTIFY`` stops nothing. The boundary
probe stays exactly as it was: a lost signal costs only latency.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, connections

from ..conf import app_settings
from ..domain import CancelToken
from ..models import AgentRun, RunStatus

logger = logging.getLogger(__name__)

CHANNEL = "nrllm_cancel"
_RECENT = 1024  # notified run ids remembered for a segment that registers just after
_BACKOFF_MIN = 0.05
_BACKOFF_MAX = 5.0
DOWN_POLL_SECONDS = 0.1  # the poll while the listening connection is lost (PostgreSQL)


def raw_connection(application_name: str) -> Any:
    """A psycopg autocommit connection to the default database, outside Django's pool."""
    import psycopg

    params = connections["default"].get_connection_params()
    params = {k: v for k, v in params.items() if k not in ("cursor_factory", "context", "pool")}
    params["application_name"] = application_name  # also when the database URL names one
    return psycopg.connect(**params, autocommit=True)


@dataclass(frozen=True)
class Tap:
    """A client of the watcher's connection (see ``CancelWatcher.tap``)."""

    channels: tuple[str, ...]
    on_batch: Callable[[list[Any]], None]
    on_state: Callable[[bool], None]
    on_connection: Callable[[Any, bool], None] | None = None


class CancelWatcher:
    """Routes committed cancels to the tokens of the segments this process executes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tokens: dict[uuid.UUID, set[CancelToken]] = {}
        # token -> (run id, deadline as a Unix time, the check that cancels the run when it is due)
        self._deadlines: dict[CancelToken, tuple[uuid.UUID, float, Callable[[], bool]]] = {}
        self._recent: OrderedDict[uuid.UUID, None] = OrderedDict()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._pid = os.getpid()
        self.listening = threading.Event()  # set while the LISTEN connection is up
        self.listener_pid: int | None = None  # its backend pid (tests terminate it)
        self.counts = {"notified": 0, "stray": 0, "tripped": 0, "polls": 0, "connects": 0}
        self._taps: dict[str, Tap] = {}  # the clients sharing this connection (push.py, deltas.py)
        self._wake_r, self._wake_w = os.pipe()  # ``wake``: the thread runs the clients' requests
        os.set_blocking(self._wake_r, False)
        self._backoff = _BACKOFF_MIN

    # --- one listening connection per process -------------------------------------------------
    def tap(
        self,
        name: str,
        channels: Iterable[str],
        on_batch: Callable[[list[Any]], None],
        on_state: Callable[[bool], None],
        on_connection: Callable[[Any, bool], None] | None = None,
    ) -> None:
        """Share this process's listening connection: LISTEN on ``channels`` too, hand every
        batch of notifications (all channels) to ``on_batch`` and tell ``on_state(True)`` once
        listening, ``on_state(False)`` once the connection is lost; all on the watcher's
        thread. ``on_connection(conn, fresh)`` runs the client's own statements on the
        connection (its LISTENs, its writes): with ``fresh`` once connected, before
        ``on_state(True)``, and without it after each ``wake``. Register before the thread
        connects (at import); ``ensure_running`` starts it."""
        self._taps[name] = Tap(tuple(channels), on_batch, on_state, on_connection)

    def wake(self) -> None:
        """Have the thread run its clients' ``on_connection`` soon (a client has requests)."""
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:  # the pipe is full: the thread is awake already
            pass

    def ensure_running(self) -> None:
        """Start the thread if it is not running (a tap needs it without any segment)."""
        self._ensure_running()

    def _tell(self, up: bool) -> None:
        for tap in list(self._taps.values()):
            try:
                tap.on_state(up)
            except Exception:
                logger.exception("a listener tap failed; the cancel watcher goes on")

    # --- segments ----------------------------------------------------------------------------
    def watch(
        self,
        run_id: uuid.UUID,
        token: CancelToken,
        *,
        deadline: float | None = None,
        on_deadline: Callable[[], bool] | None = None,
    ) -> Callable[[], None]:
        """Route cancels of ``run_id`` to ``token`` until the returned function is called.

        With ``deadline`` (a Unix time) and ``on_deadline``: once it passes, ``on_deadline()``
        is called on the watcher's thread; it cancels the run (the guarded system cancel) and
        answers whether the run is now cancelled, and then the token trips.
        """
        self._ensure_running()
        with self._lock:
            self._tokens.setdefault(run_id, set()).add(token)
            if deadline is not None and on_deadline is not None:
                self._deadlines[token] = (run_id, deadline, on_deadline)
            notified_before = run_id in self._recent
        if notified_before:  # the NOTIFY raced ahead of this registration: check the row now
            self._trip(self._confirmed_by_orm([run_id]))
        return lambda: self._unwatch(run_id, token)

    def _unwatch(self, run_id: uuid.UUID, token: CancelToken) -> None:
        with self._lock:
            self._deadlines.pop(token, None)
            tokens = self._tokens.get(run_id)
            if tokens is not None:
                tokens.discard(token)
                if not tokens:
                    del self._tokens[run_id]

    def watched(self) -> list[uuid.UUID]:
        with self._lock:
            return list(self._tokens)

    # --- cancels committed by this process ----------------------------------------------------
    def cancelled_here(self, run_id: uuid.UUID) -> None:
        """A cancel of ``run_id`` committed in this process: trip its tokens without waiting."""
        self._trip([run_id])

    def check_now(self) -> None:
        """Re-read every watched run now (after a bulk cancel committed in this process)."""
        ids = self.watched()
        if ids:
            self._trip(self._confirmed_by_orm(ids))

    # --- the thread ---------------------------------------------------------------------------
    def _ensure_running(self) -> None:
        if self._pid != os.getpid():  # forked (an RQ work horse): the parent's thread is not here
            taps = self._taps
            os.close(self._wake_r)
            os.close(self._wake_w)
            self.__init__()  # type: ignore[misc]
            self._taps = taps
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="nrllm-cancel-watcher", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread (tests); it starts again with the next ``watch``."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        self._thread = None

    def _run(self) -> None:
        postgres = connections["default"].vendor == "postgresql"
        self._backoff = _BACKOFF_MIN
        retry_at = 0.0
        while not self._stop.is_set():
            if postgres and time.monotonic() >= retry_at:
                try:
                    self._listen()  # sets the back-off to its minimum once connected
                except Exception as exc:  # the connection is lost: poll, then reconnect
                    logger.warning(
                        "cancel listener lost its connection (%s); polling until it is back", type(exc).__name__
                    )
                finally:
                    was = self.listening.is_set()
                    self.listening.clear()
                    self.listener_pid = None
                    if was:
                        self._tell(False)
                retry_at = time.monotonic() + self._backoff
                self._backoff = min(self._backoff * 2, _BACKOFF_MAX)
            self._poll()
            self._fire_due()
            if postgres:  # down: poll fast, and try again when the back-off says so
                self._stop.wait(max(0.0, min(DOWN_POLL_SECONDS, retry_at - time.monotonic(), self._next_wait())))
            else:
                self._stop.wait(self._next_wait())

    def _poll_seconds(self) -> float:
        return max(0.01, app_settings.CANCEL_POLL_SECONDS)

    def _next_wait(self) -> float:
        """Until the next poll, or the next deadline if it comes sooner."""
        with self._lock:
            soonest = min((due for _, due, _ in self._deadlines.values()), default=None)
        wait = self._poll_seconds()
        return wait if soonest is None else max(0.0, min(wait, soonest - time.time()))

    def _fire_due(self) -> None:
        """Cancel the runs whose deadline passed (on this thread), then trip their tokens."""
        now = time.time()
        with self._lock:
            due = [(token, entry) for token, entry in self._deadlines.items() if entry[1] <= now]
            for token, _ in due:
                del self._deadlines[token]
        if not due:
            return
        try:
            for _, (run_id, _, check) in due:
                try:
                    if check():
                        self._trip([run_id])
                except Exception:  # fail-soft: the boundary check of the limit still applies
                    logger.exception("run %s: the deadline check failed", run_id)
        finally:
            connections["default"].close()

    def _listen(self) -> None:
        with raw_connection("nrllm-cancel-listener") as conn:
            taps = list(self._taps.values())
            channels = dict.fromkeys([CHANNEL, *(c for tap in taps for c in tap.channels)])
            conn.execute("; ".join(f"LISTEN {channel}" for channel in channels))
            self._serve(conn, taps, fresh=True)
            self.listener_pid = conn.info.backend_pid
            self.counts["connects"] += 1
            self._backoff = _BACKOFF_MIN  # connected again: the next loss is retried quickly
            self.listening.set()
            self._tell(True)
            # Cancels that committed before LISTEN took effect sent nothing this connection saw.
            self._trip(self._confirmed(conn, self.watched()))
            while not self._stop.is_set():
                ready, _, _ = select.select([conn.fileno(), self._wake_r], [], [], self._next_wait())
                if self._wake_r in ready:
                    self._drain_wake()
                    self._serve(conn, taps, fresh=False)
                batch = list(conn.notifies(timeout=0))  # what arrived (also during the clients' statements)
                if batch:
                    ids = {run_id for n in batch if n.channel == CHANNEL for run_id in self._parse(n.payload)}
                    if ids:
                        self._route(ids, conn)
                    for tap in taps:
                        try:
                            tap.on_batch(batch)
                        except Exception:
                            logger.exception("a listener tap failed; the cancel watcher goes on")
                self._fire_due()

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 512):
                pass
        except BlockingIOError:
            pass

    @staticmethod
    def _serve(conn: Any, taps: list[Tap], *, fresh: bool) -> None:
        """The clients' statements on the listening connection. A failure of the connection
        itself propagates (the thread reconnects); a client's own mistake is logged."""
        import psycopg

        for tap in taps:
            if tap.on_connection is None:
                continue
            try:
                tap.on_connection(conn, fresh)
            except psycopg.OperationalError:
                raise
            except Exception:
                logger.exception("a listener client failed; the cancel watcher goes on")

    def _parse(self, payload: str) -> Iterable[uuid.UUID]:
        try:
            return (uuid.UUID(payload),)
        except ValueError:
            self.counts["stray"] += 1
            return ()

    def _route(self, ids: set[uuid.UUID], conn: Any) -> None:
        self.counts["notified"] += len(ids)
        with self._lock:
            for run_id in ids:
                self._recent[run_id] = None
                self._recent.move_to_end(run_id)
            while len(self._recent) > _RECENT:
                self._recent.popitem(last=False)
            mine = [run_id for run_id in ids if run_id in self._tokens]
        if mine:
            self._trip(self._confirmed(conn, mine))

    @staticmethod
    def _confirmed(conn: Any, ids: list[uuid.UUID]) -> list[uuid.UUID]:
        """The runs among ``ids`` whose row reads ``cancelled`` (on the listening connection)."""
        if not ids:
            return []
        rows = conn.execute(
            f"SELECT id FROM {AgentRun._meta.db_table} WHERE id = ANY(%s) AND status = %s",
            [ids, RunStatus.CANCELLED.value],
        ).fetchall()
        return [row[0] for row in rows]

    def _confirmed_by_orm(self, ids: list[uuid.UUID]) -> list[uuid.UUID]:
        try:
            return list(
                AgentRun.objects.filter(pk__in=ids, status=RunStatus.CANCELLED).order_by().values_list("pk", flat=True)
            )
        except DatabaseError as exc:  # fail-soft: not knowing is "not cancelled"
            logger.warning("cancel poll failed (%s); the boundary probe still applies", type(exc).__name__)
            return []

    def _poll(self) -> None:
        ids = self.watched()
        if not ids:
            return
        self.counts["polls"] += 1
        try:
            self._trip(self._confirmed_by_orm(ids))
        finally:
            connections["default"].close()  # this thread holds no connection between polls

    def _trip(self, ids: Iterable[uuid.UUID]) -> None:
        for run_id in ids:
            with self._lock:
                tokens = list(self._tokens.get(run_id, ()))
            for token in tokens:
                if token.cancel():
                    self.counts["tripped"] += 1
                    logger.info("run %s: cancel signal delivered to the step in flight", run_id)


watcher = CancelWatcher()
"""This process's watcher."""


def wait_listening(timeout: float = 5.0) -> bool:
    """Block until the PostgreSQL listener is connected (tests, benchmarks)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if watcher.listening.wait(0.05):
            return True
        watcher._ensure_running()
    return False
