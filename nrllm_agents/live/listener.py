"""The process's one listening connection, and its one owner.

A process LISTENs on PostgreSQL once, whatever it does. The connection and its daemon thread live
here; the cancel watcher (``interrupts.py``), the live stream's hub (``push.py``) and the
publisher (``deltas.py``) are its clients (``Client``, added by ``live.install()``). It hands every
batch of notifications to every client in the order they were added, runs a client's statements
on its connection when asked (``wake``), reports up and down (``state``), and gives every client a
turn (``tick``) while down and always on SQLite. A lost connection is retried with a doubling
pause (50 ms up to 5 s).

The client protocol in full: docs/internals.md ("One listening connection").
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.db import connections

if TYPE_CHECKING:
    import psycopg

logger = logging.getLogger(__name__)

BACKOFF_MIN = 0.05  # the first retry after a lost connection; again after each reconnect
BACKOFF_MAX = 5.0
IDLE_WAIT = 1.0  # the longest sleep when no client asks for a turn sooner
APPLICATION_NAME = "nrllm-cancel-listener"

# psycopg is imported where a connection is opened: an install on SQLite needs no PostgreSQL driver
if TYPE_CHECKING:
    Connection = psycopg.Connection[Any]
    Notify = psycopg.Notify
else:
    Connection = Notify = Any


def raw_connection(application_name: str) -> Connection:
    """A psycopg autocommit connection to the default database, outside Django's pool."""
    params = connections["default"].get_connection_params()
    params = {k: v for k, v in params.items() if k not in ("cursor_factory", "context", "pool")}
    params["application_name"] = application_name  # also when the database URL names one
    import psycopg

    return psycopg.connect(**params, autocommit=True)


class Client:
    """A user of the process's listening connection. Every hook runs on the listener's thread;
    each does nothing unless overridden."""

    channels: tuple[str, ...] = ()  # LISTENed on every connection the listener opens

    def connected(self, conn: Connection) -> None:
        """A fresh connection listens on ``channels``: run this client's statements on it."""

    def state(self, up: bool) -> None:
        """The connection is up (after every client's ``connected``) or was lost."""

    def notified(self, conn: Connection, batch: list[Notify]) -> None:
        """Notifications arrived (of every client's channels: pick your own)."""

    def woken(self, conn: Connection) -> None:
        """Some client called ``wake``: run the statements this client has pending."""

    def tick(self, conn: Connection | None) -> float | None:
        """The thread's turn, ``conn`` None while no connection is up (always on SQLite).
        Returns the longest the thread may sleep before this client's next turn (None: any)."""
        return None


class Listener:
    """This process's listening connection and its thread (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: list[Client] = []
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._pid = os.getpid()
        self.listening = threading.Event()  # set while the LISTEN connection is up
        self.backend_pid: int | None = None  # its backend pid (tests terminate it)
        self.counts = {"connects": 0}
        self._wake_r, self._wake_w = os.pipe()  # ``wake``: the thread runs the clients' requests
        os.set_blocking(self._wake_r, False)
        self._backoff = BACKOFF_MIN

    def add(self, client: Client) -> None:
        """Register ``client`` (by the app's ``ready()``, before the thread connects); once only."""
        if client not in self._clients:
            self._clients.append(client)

    def wake(self) -> None:
        """Have the thread run its clients' ``woken`` soon (a client has requests)."""
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:  # the pipe is full: the thread is awake already
            pass

    def ensure_running(self) -> None:
        """Start the thread if it is not running (also in a process forked from one that ran it)."""
        if self._pid != os.getpid():  # forked (an RQ work horse): the parent's thread is not here
            clients = self._clients
            os.close(self._wake_r)
            os.close(self._wake_w)
            self.__init__()  # type: ignore[misc]
            self._clients = clients
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="nrllm-listener", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread (tests); it starts again with the next ``ensure_running``."""
        self._stop.set()
        self.wake()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        self._thread = None

    # --- the thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        postgres = connections["default"].vendor == "postgresql"
        self._backoff = BACKOFF_MIN
        retry_at = 0.0
        while not self._stop.is_set():
            if postgres and time.monotonic() >= retry_at:
                try:
                    self._listen()  # sets the back-off to its minimum once connected
                except Exception as exc:  # the connection is lost: the clients poll, then it reconnects
                    logger.warning("listener lost its connection (%s); reconnecting", type(exc).__name__)
                finally:
                    was = self.listening.is_set()
                    self.listening.clear()
                    self.backend_pid = None
                    if was:
                        self._tell(False)
                retry_at = time.monotonic() + self._backoff
                self._backoff = min(self._backoff * 2, BACKOFF_MAX)
            wait = self._tick(None)
            if postgres:  # down: try again when the back-off says so
                wait = min(wait, retry_at - time.monotonic())
            self._stop.wait(max(0.0, wait))

    def _listen(self) -> None:
        with raw_connection(APPLICATION_NAME) as conn:
            clients = list(self._clients)
            channels = dict.fromkeys(c for client in clients for c in client.channels)
            if channels:
                conn.execute("; ".join(f"LISTEN {channel}" for channel in channels))
            self._each(clients, conn, lambda client: client.connected(conn))
            self.backend_pid = conn.info.backend_pid
            self.counts["connects"] += 1
            self._backoff = BACKOFF_MIN  # connected again: the next loss is retried quickly
            self.listening.set()
            self._tell(True)
            while not self._stop.is_set():
                wait = self._tick(conn)
                # A notification that arrived while a client's statement ran on this connection
                # (a cancel's row check, a tick) was read off the socket by psycopg then: nothing
                # is left to wake select(), so it is taken first. Waiting for the next tick
                # delayed such a cancel by up to a second.
                batch = list(conn.notifies(timeout=0))
                if not batch:
                    ready, _, _ = select.select([conn.fileno(), self._wake_r], [], [], max(0.0, wait))
                    if self._wake_r in ready:
                        self._drain_wake()
                        self._each(clients, conn, lambda client: client.woken(conn))
                    batch = list(conn.notifies(timeout=0))  # what arrived (also during ``woken``)
                if batch:
                    self._each(clients, conn, lambda client: client.notified(conn, batch))

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 512):
                pass
        except BlockingIOError:
            pass

    @staticmethod
    def _each(clients: list[Client], conn: Connection | None, call: Callable[[Client], None]) -> None:
        """``call(client)`` for each client. A failure of the connection itself propagates (the
        thread reconnects); a client's own mistake is logged."""
        for client in clients:
            try:
                call(client)
            except Exception as exc:
                if conn is not None and _connection_lost(exc):
                    raise
                logger.exception("a listener client failed; the listener goes on")

    def _tell(self, up: bool) -> None:
        self._each(list(self._clients), None, lambda client: client.state(up))

    def _tick(self, conn: Connection | None) -> float:
        """Every client's turn; the longest the thread may sleep before the next."""
        waits: list[float] = []

        def turn(client: Client) -> None:
            wait = client.tick(conn)
            if wait is not None:
                waits.append(wait)

        self._each(list(self._clients), conn, turn)
        return min(waits, default=IDLE_WAIT)


listener = Listener()
"""This process's listener."""


def _connection_lost(exc: BaseException) -> bool:
    """True when ``exc`` is psycopg's failure of the connection itself (only met on PostgreSQL)."""
    import psycopg

    return isinstance(exc, psycopg.OperationalError)
