"""The pace of a live stream, shared by every server-sent stream (the browser's, the Agent
Protocol's, AG-UI's): how often it reads when nothing pushes, when it sends a keepalive comment,
and when a long stream closes (the client reconnects and resumes where it was)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..conf import app_settings
from .watch import Watch

KEEPALIVE = ": keepalive\n\n"  # an SSE comment: keeps proxies from closing a silent stream


@dataclass(frozen=True)
class Pace:
    """Timing of one stream (seconds)."""

    poll: float
    heartbeat: float
    max_seconds: float

    @classmethod
    def from_settings(cls) -> Pace:
        return cls(
            poll=app_settings.STREAM_POLL_SECONDS,
            heartbeat=app_settings.STREAM_HEARTBEAT_SECONDS,
            max_seconds=app_settings.STREAM_MAX_SECONDS,
        )


class Clock:
    """Decides when a stream sends a keepalive, when it closes, and how long it waits."""

    def __init__(self, pace: Pace) -> None:
        self.pace = pace
        self.started = self.last_write = time.monotonic()

    def after(self, text: str, finished: bool) -> tuple[str, bool]:
        """What to send after an update whose frames are ``text`` (with a keepalive when the
        stream has been silent for a heartbeat) and whether the stream ends after it."""
        now = time.monotonic()
        if text:
            self.last_write = now
        if finished or now - self.started >= self.pace.max_seconds:
            return text, True
        if now - self.last_write >= self.pace.heartbeat:
            self.last_write = now
            return text + KEEPALIVE, False
        return text, False

    def wait_for(self, watch: Watch) -> float:
        """Pushed: until the next keepalive or the end; else the poll interval."""
        now = time.monotonic()
        idle = min(self.last_write + self.pace.heartbeat, self.started + self.pace.max_seconds) - now
        return max(0.0, min(idle, self.pace.poll) if not watch.pushed else idle)
