"""Caps on open streams, per user and for the whole process, so watchers cannot exhaust it.

The caps are ``admission.slots`` of kind ``STREAM`` (``STREAM_MAX_PER_USER``,
``STREAM_MAX_OPEN``). A stream takes a slot before it starts and gives it back when it ends,
however it ends (the run finished, the client went away, the server closed it):
``StreamSlot.release`` is idempotent and is called both by the stream's own ``finally`` and by
the response's ``close()`` (a response closed before its first chunk never runs its generator).
"""

from __future__ import annotations

from typing import Any

from ..admission import Kind, Slot, SlotRefused, hold, in_use

StreamSlot = Slot
StreamRefused = SlotRefused


def acquire(user_key: Any) -> Slot | SlotRefused:
    """A slot for a new stream of ``user_key``, or why not."""
    return hold(Kind.STREAM, user_key)


def open_streams() -> tuple[int, dict[Any, int]]:
    """``(total, per user)`` streams open now (tests, metrics)."""
    return in_use(Kind.STREAM)
