"""The retry policy: how many times a run may go back to the queue, and how long it waits.

One object, asked everywhere a retry is decided: the runtime when a model call fails
transiently, and the reaper when a worker was lost. They share the run's ``attempts`` counter,
so a run cannot retry forever by alternating the two. A worker waiting for Redis to come back
asks the same kind of object (``RetryPolicy.reconnect()``): it retries without end, with a
bounded wait between two tries.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from ..conf import app_settings

RECONNECT_BASE_SECONDS = 0.5
RECONNECT_MAX_SECONDS = 4.0


@dataclass(frozen=True)
class RetryPolicy:
    """``max_attempts`` requeues per run; the wait before attempt ``n`` is ``base * 2**n``, capped."""

    max_attempts: int
    base_seconds: float
    max_seconds: float

    @classmethod
    def from_settings(cls) -> RetryPolicy:
        return cls(
            app_settings.MAX_ATTEMPTS,
            app_settings.RETRY_BASE_SECONDS,
            app_settings.RETRY_MAX_SECONDS,
        )

    @classmethod
    def reconnect(cls) -> RetryPolicy:
        """How a worker waits for Redis during an outage: forever, 0.5 s, 1 s, 2 s, then every
        ``RECONNECT_MAX_SECONDS`` (so it is back at most that long after Redis is)."""
        return cls(sys.maxsize, RECONNECT_BASE_SECONDS, RECONNECT_MAX_SECONDS)

    def may_retry(self, attempts: int) -> bool:
        """Whether a run that was requeued ``attempts`` times may be requeued once more."""
        return attempts < self.max_attempts

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt`` (0 for the first)."""
        return min(self.base_seconds * 2.0 ** min(attempt, 64), self.max_seconds)
