"""Cancel signals: trip the token of a segment within milliseconds of its cancel's commit.

Every process that executes runs holds ONE watcher, which routes run ids to the cancel tokens of
the segments it executes. It owns no connection and no thread: it is a client of ``listener.py``.
On PostgreSQL it hears ``nrllm_cancel`` (a trigger, ``store/sql/notify.sql``, sends the run id
after the cancelling COMMIT, whichever path cancelled); on SQLite, and while the listener is down,
it polls the rows of its runs. It also fires run deadlines as the system's guarded cancel.

The row is the truth; the signal only makes the stop sooner: a notification trips nothing until
the row reads ``cancelled``, and a lost one costs only latency. Details: docs/internals.md
("Cancel signals").
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable

from django.db import DatabaseError, connections

from ..conf import app_settings
from ..domain import CancelToken
from ..models import AgentRun, RunStatus
from .listener import Client, Connection, Notify, listener

logger = logging.getLogger(__name__)

CHANNEL = "nrllm_cancel"
_RECENT = 1024  # notified run ids remembered for a segment that registers just after
DOWN_POLL_SECONDS = 0.1  # the poll while the listening connection is lost (PostgreSQL)


class CancelWatcher(Client):
    """Routes committed cancels to the tokens of the segments this process executes."""

    channels = (CHANNEL,)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tokens: dict[uuid.UUID, set[CancelToken]] = {}
        # token -> (run id, deadline as a Unix time, the check that cancels the run when it is due)
        self._deadlines: dict[CancelToken, tuple[uuid.UUID, float, Callable[[], bool]]] = {}
        self._recent: OrderedDict[uuid.UUID, None] = OrderedDict()
        self._pid = os.getpid()
        self.counts = {"notified": 0, "stray": 0, "tripped": 0, "polls": 0, "connects": 0}

    def _forked(self) -> None:
        if self._pid != os.getpid():  # forked (an RQ work horse): the parent's segments are not here
            self.__init__()  # type: ignore[misc]

    # --- the listener it rides on ---------------------------------------------------------------
    @property
    def listening(self) -> threading.Event:
        """Set while the process's listening connection is up."""
        return listener.listening

    @property
    def listener_pid(self) -> int | None:
        """The backend pid of the listening connection (tests terminate it)."""
        return listener.backend_pid

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the listener's thread (tests); it starts again with the next ``watch``."""
        listener.stop(timeout)

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
        is called on the listener's thread; it cancels the run (the guarded system cancel) and
        answers whether the run is now cancelled, and then the token trips.
        """
        self._forked()
        listener.ensure_running()
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

    # --- the listener's hooks (on its thread) ------------------------------------------------
    def connected(self, conn: Connection) -> None:
        # Cancels that committed before LISTEN took effect sent nothing this connection saw.
        self._trip(self._confirmed(conn, self.watched()))

    def state(self, up: bool) -> None:
        if up:
            self.counts["connects"] += 1

    def notified(self, conn: Connection, batch: list[Notify]) -> None:
        ids = {run_id for n in batch if n.channel == CHANNEL for run_id in self._parse(n.payload)}
        if ids:
            self._route(ids, conn)

    def tick(self, conn: Connection | None) -> float:
        """Poll while no connection is up, fire the deadlines that passed; the next turn is due
        at the next poll or deadline (within ``DOWN_POLL_SECONDS`` while PostgreSQL is lost)."""
        if conn is None:
            self._poll()
        self._fire_due()
        wait = self._next_wait()
        if conn is None and connections["default"].vendor == "postgresql":
            wait = min(DOWN_POLL_SECONDS, wait)
        return wait

    def _poll_seconds(self) -> float:
        return max(0.01, float(app_settings.CANCEL_POLL_SECONDS))

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

    def _parse(self, payload: str) -> Iterable[uuid.UUID]:
        try:
            return (uuid.UUID(payload),)
        except ValueError:
            self.counts["stray"] += 1
            return ()

    def _route(self, ids: set[uuid.UUID], conn: Connection) -> None:
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
    def _confirmed(conn: Connection, ids: list[uuid.UUID]) -> list[uuid.UUID]:
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
