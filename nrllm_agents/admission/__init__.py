"""Admission: whether a caller may start (or cancel) something now. Every surface asks here.

- ``rates``: the one rate limiter. Every way of creating a run (API create and fork, the
  playground's start and fork, and any later surface) calls ``take(request, Action.CREATE)``;
  every cancel (single and bulk, API and playground) ``take(request, Action.CANCEL)``. The
  counter is atomic across threads and processes: Redis (one Lua script) when ``REDIS_URL`` is
  set, else one ``INSERT … ON CONFLICT DO UPDATE … WHERE`` on the database.
- ``slots``: per-process caps on what holds a thread for long — open streams, ``mode: sync``
  runs executing in a request, interactive playground runs — per user and in total;
  ``capacity``: what the server process can hold (its threads, read from gunicorn), which the
  open streams' cap follows by default.
"""

from __future__ import annotations

from .rates import Action, RateRefused, rate_for, reset, take
from .slots import Kind, Slot, SlotRefused, hold, in_use

__all__ = [
    "Action",
    "Kind",
    "RateRefused",
    "Slot",
    "SlotRefused",
    "hold",
    "in_use",
    "rate_for",
    "reset",
    "take",
]
