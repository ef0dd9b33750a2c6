"""Many segments at once in one process: one thread per segment in flight, a bounded number.

A segment spends almost all its time waiting (on the model, on a tool's remote call), so a
thread per segment costs little: its stack pages, a few objects, and no database connection
between step boundaries (``db.release_connection``). Each segment keeps its own lease and its
own cancel token, so a thread never needs to be killed from outside: a cancel trips the token,
a shutdown hands the run back (``segment.hand_back_all``), a crash of the whole process leaves
leases that lapse and the reaper requeues the runs.

Used by the threaded RQ worker (``manage.py agent_worker``) and by the in-process executor of
the embedded default (``executors.local``).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from django.db import connections

logger = logging.getLogger(__name__)

__all__ = ["SegmentExecutor"]


class SegmentExecutor:
    """Runs callables on threads, at most ``concurrency`` at once; the rest wait in a backlog.

    ``submit`` never blocks. A caller that must not take more than it can run (a worker that
    dequeues) asks ``wait_for_slot`` first. Each thread closes its Django connections after
    every callable (back to the pool, if there is one). ``daemon`` threads do not keep the
    process alive: a worker that must exit (a second SIGTERM) exits, and leases recover its
    runs.
    """

    def __init__(self, concurrency: int, *, name: str = "nrllm-segment", daemon: bool = True) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")
        self.concurrency = concurrency
        self.name = name
        self.daemon = daemon
        self._changed = threading.Condition()
        self._backlog: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self._threads = 0  # threads alive (each runs callables until the backlog is empty)
        self._busy = 0  # callables submitted and not finished (running or in the backlog)
        self._started = 0

    @property
    def in_flight(self) -> int:
        """Callables submitted and not yet finished."""
        with self._changed:
            return self._busy

    def free_slots(self) -> int:
        with self._changed:
            return max(0, self.concurrency - self._busy)

    def submit(self, function: Callable[..., Any], *args: Any) -> None:
        """Run ``function(*args)`` on a thread now, or as soon as one is free."""
        with self._changed:
            self._busy += 1
            self._backlog.append((function, args))
            if self._threads >= self.concurrency:
                return
            self._threads += 1
            self._started += 1
            number = self._started
        try:
            threading.Thread(target=self._loop, name=f"{self.name}-{number}", daemon=self.daemon).start()
        except BaseException:
            with self._changed:
                self._threads -= 1
                self._changed.notify_all()
            raise

    def wait_for_slot(self, timeout: float | None = None) -> bool:
        """Block until fewer than ``concurrency`` callables are in flight; False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: self._busy < self.concurrency, timeout)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until nothing is in flight; False if something still is after ``timeout``."""
        with self._changed:
            return self._changed.wait_for(lambda: self._busy == 0, timeout)

    def _loop(self) -> None:
        while True:
            with self._changed:
                if not self._backlog:
                    self._threads -= 1
                    self._changed.notify_all()
                    return
                function, args = self._backlog.popleft()
            try:
                function(*args)
            except BaseException:  # one segment's failure must not end the thread's backlog
                logger.exception("%s: a segment raised", self.name)
            finally:
                connections.close_all()  # this thread's connections: back to the pool
                with self._changed:
                    self._busy -= 1
                    self._changed.notify_all()
