"""What a fence returns (the one result type of every status transition), and what it refuses."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Transition:
    """What a fence did.

    ``applied``: the row moved. ``status``: the status now (``None`` when no such run).
    ``previous``: the status the fence found.
    """

    applied: bool
    status: str | None
    previous: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def found(self) -> bool:
        return self.status is not None


NOT_FOUND = Transition(applied=False, status=None)


@dataclass(frozen=True)
class Operator:
    """Who cancelled when it is not a user of the site: an operator at a shell (``agent_cancel
    --by``, by default the OS user). Recorded by name; ``pk`` is ``None``."""

    name: str
    pk: None = None

    def get_username(self) -> str:
        return self.name


def actor(by: Any) -> tuple[Any, str | None]:
    """``(user or None, name or None)`` of whoever acts: a user, an ``Operator``, or nobody."""
    if by is None:
        return None, None
    return (by if by.pk is not None else None), str(by.get_username())[:150]


class Lease(enum.Enum):
    """What a boundary learnt about its segment's hold on the run (a boundary moves no status).

    ``renew``, ``record_step`` and ``append_owned`` answer ``HELD`` (the write happened),
    ``NOT_HELD`` (it matched no row and wrote nothing) or ``UNKNOWN`` (the store could not be
    reached). ``why_not_held`` then tells ``CANCELLED`` (cancelled while ours: the step in
    flight is still recorded) from ``LOST`` (reaped, finished, taken by another segment).
    ``UNKNOWN`` is never read as a cancel.
    """

    HELD = "held"
    NOT_HELD = "not_held"
    CANCELLED = "cancelled"
    LOST = "lost"
    UNKNOWN = "unknown"

    def __bool__(self) -> bool:
        # ``if store.renew(...)`` would read UNKNOWN and NOT_HELD as true: refuse it.
        raise TypeError("a Lease is not a bool: compare it with Lease.HELD")


MAX_REASON_CHARS = 1000
"""The longest cancel reason a run records; every surface refuses a longer one with ``reason_problem``."""


class InvalidArgument(ValueError):
    """A value the store will not record (an over-long reason, a NUL byte); says which and why."""


def reason_problem(reason: str) -> str | None:
    """Why a cancel reason cannot be recorded, in the words every surface shows; ``None`` if it can."""
    if len(reason) > MAX_REASON_CHARS:
        return f"the reason is longer than {MAX_REASON_CHARS} characters ({len(reason)})"
    if "\x00" in reason:
        return "the reason contains a NUL character"
    return None


def checked_reason(reason: str | None) -> str:
    """``reason`` as recorded; raises ``InvalidArgument`` for one that cannot be."""
    text = reason or ""
    problem = reason_problem(text)
    if problem is not None:
        raise InvalidArgument(problem)
    return text
