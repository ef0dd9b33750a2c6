"""What a fence returns: the one result type of every status transition."""

from __future__ import annotations

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
