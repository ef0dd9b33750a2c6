"""Per-process caps on work that holds a thread for long, per user and for the whole process.

Three kinds: open streams (each holds a server thread under a threaded WSGI server),
``mode: sync`` runs and approvals of the API (the request's thread executes the run), and
interactive playground runs (a background thread of the web process each). A cap is counted in
this process because what it protects — its threads and its connections — belongs to this
process; taking a slot is a check and an increment under one lock, so a burst cannot pass it.

A slot is taken before the work starts and given back when it ends, however it ends:
``Slot.release`` is idempotent, so a ``finally`` and a response's ``close()`` may both call it.
A limit of 0 or less means unlimited.
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass
from typing import Any

from ..conf import app_settings
from . import capacity


class Kind(enum.StrEnum):
    """What a slot holds."""

    STREAM = "stream"  # an open live stream (SSE)
    SYNC = "sync"  # a run executing in an API request (mode sync, a sync approval)
    INTERACTIVE = "interactive"  # a playground run executing in a background thread


# kind -> (per-user setting, per-process setting)
LIMITS = {
    Kind.STREAM: ("STREAM_MAX_PER_USER", "STREAM_MAX_OPEN"),
    Kind.SYNC: ("SYNC_MAX_PER_USER", "SYNC_MAX_OPEN"),
    Kind.INTERACTIVE: ("INTERACTIVE_MAX_PER_USER", "INTERACTIVE_WORKERS"),
}

_WORDS = {
    Kind.STREAM: (
        "Too many open streams for this user ({n} at most); close one and retry.",
        "Too many open streams on this server ({n} at most); retry later.",
    ),
    Kind.SYNC: (
        "Too many sync runs executing for this user ({n} at most); queue the run (mode queued) "
        "or retry when one has finished.",
        "{n} sync runs are already executing in this server process; queue the run (mode queued) or retry later.",
    ),
    Kind.INTERACTIVE: (
        "You already have {n} interactive runs executing ({n} at most per user); "
        "wait for one to finish, or queue the run for a worker.",
        "{n} interactive runs are already executing in this web process; "
        "try again in a moment, or queue the run for a worker.",
    ),
}

_lock = threading.Lock()
_total: dict[Kind, int] = dict.fromkeys(Kind, 0)
_by_user: dict[tuple[Kind, Any], int] = {}


@dataclass(frozen=True)
class SlotRefused:
    """Why a slot was refused: the cap that was reached, in words for a 429/503 or a message."""

    kind: Kind
    detail: str
    per_user: bool  # the caller's own cap (else the process's)


class Slot:
    """One place under a kind's caps, held until ``release``."""

    def __init__(self, kind: Kind, user_key: Any) -> None:
        self.kind, self.user_key = kind, user_key
        self._released = False

    def release(self) -> None:
        with _lock:
            if self._released:
                return
            self._released = True
            _total[self.kind] -= 1
            key = (self.kind, self.user_key)
            left = _by_user.get(key, 1) - 1
            if left > 0:
                _by_user[key] = left
            else:
                _by_user.pop(key, None)

    def __enter__(self) -> Slot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def hold(kind: Kind, user_key: Any) -> Slot | SlotRefused:
    """A slot of ``kind`` for ``user_key`` (a user's pk), or why not."""
    per_user_name, total_name = LIMITS[kind]
    per_user = getattr(app_settings, per_user_name)
    total = capacity.stream_max_open() if kind == Kind.STREAM else getattr(app_settings, total_name)
    mine_words, all_words = _WORDS[kind]
    key = (kind, user_key)
    with _lock:
        mine = _by_user.get(key, 0)
        if per_user > 0 and mine >= per_user:
            return SlotRefused(kind, mine_words.format(n=per_user), per_user=True)
        if total > 0 and _total[kind] >= total:
            return SlotRefused(kind, all_words.format(n=total), per_user=False)
        _total[kind] += 1
        _by_user[key] = mine + 1
    return Slot(kind, user_key)


def in_use(kind: Kind) -> tuple[int, dict[Any, int]]:
    """``(total, per user)`` slots of ``kind`` held now (tests, metrics)."""
    with _lock:
        return _total[kind], {user: n for (k, user), n in _by_user.items() if k == kind}
