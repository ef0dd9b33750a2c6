"""A count of background work in this process, with a way to wait until it drains."""

from __future__ import annotations

import threading
import time


class InFlight:
    """Counts started-but-unfinished background work; ``wait_idle`` blocks until none is left."""

    def __init__(self) -> None:
        self._count = 0
        self._changed = threading.Condition()

    def started(self) -> None:
        with self._changed:
            self._count += 1

    def finished(self) -> None:
        with self._changed:
            self._count -= 1
            self._changed.notify_all()

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """True once nothing is in flight; False if work remains after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(min(remaining, 0.05))
        return True
