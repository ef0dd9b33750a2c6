"""Caps on open streams, per user and for the whole process, so watchers cannot exhaust it.

A stream takes a slot before it starts and gives it back when it ends, however it ends (the
run finished, the client went away, the server closed it): ``StreamSlot.release`` is
idempotent and is called both by the stream's own ``finally`` and by the response's
``close()`` (a response closed before its first chunk never runs its generator).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from ..conf import app_settings

_lock = threading.Lock()
_open_total = 0
_open_by_user: dict[Any, int] = {}


@dataclass(frozen=True)
class StreamRefused:
    """Why a new stream was refused: the limit that was reached, for a 429 ``detail``."""

    detail: str


class StreamSlot:
    """One open stream's place under the caps."""

    def __init__(self, user_key: Any) -> None:
        self.user_key = user_key
        self._released = False

    def release(self) -> None:
        global _open_total
        with _lock:
            if self._released:
                return
            self._released = True
            _open_total -= 1
            left = _open_by_user.get(self.user_key, 1) - 1
            if left > 0:
                _open_by_user[self.user_key] = left
            else:
                _open_by_user.pop(self.user_key, None)


def acquire(user_key: Any) -> StreamSlot | StreamRefused:
    """A slot for a new stream of ``user_key``, or why not (``STREAM_MAX_PER_USER``,
    ``STREAM_MAX_OPEN``; a limit of 0 or less means unlimited)."""
    global _open_total
    per_user, total = app_settings.STREAM_MAX_PER_USER, app_settings.STREAM_MAX_OPEN
    with _lock:
        mine = _open_by_user.get(user_key, 0)
        if per_user > 0 and mine >= per_user:
            return StreamRefused(f"Too many open streams for this user ({per_user} at most); close one and retry.")
        if total > 0 and _open_total >= total:
            return StreamRefused(f"Too many open streams on this server ({total} at most); retry later.")
        _open_total += 1
        _open_by_user[user_key] = mine + 1
    return StreamSlot(user_key)


def open_streams() -> tuple[int, dict[Any, int]]:
    """``(total, per user)`` streams open now (tests, metrics)."""
    with _lock:
        return _open_total, dict(_open_by_user)
