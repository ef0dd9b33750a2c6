"""Fixture tools shipped with the product, for tests and drills of failure handling.

Enable with ``NRLLM_EXTRA_TOOLS="slow_note=nrllm_agents.testing.tools.SlowNote"``.
"""

from __future__ import annotations

import math
import time
import uuid
from typing import Any

from ..domain import ToolError


class SlowNote:
    """Writes a ``Note`` at once, then takes ``seconds`` to finish: a slow non-idempotent effect.

    Killing a worker during those seconds leaves the effect done but unrecorded — the case
    the write fence exists for. Needs no approval, so drills need no human.
    """

    name = "slow_note"
    description = "Save a note, then wait (a slow side effect, for failure drills)."
    parameters = {
        "type": "object",
        "properties": {"title": {"type": "string"}, "seconds": {"type": "number", "minimum": 0, "maximum": 30}},
        "required": ["title"],
    }
    requires_approval = False
    idempotent = False

    def __init__(self, run_id: uuid.UUID | None = None) -> None:
        self.run_id = run_id

    def execute(self, arguments: dict[str, Any]) -> Any:
        from ..models import Note

        title, seconds = arguments.get("title"), arguments.get("seconds", 0)
        if not isinstance(title, str) or not title:
            raise ToolError("title must be a non-empty string")
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, (int, float))
            or not math.isfinite(seconds)
            or not 0 <= seconds <= 30
        ):
            raise ToolError("seconds must be a number from 0 to 30")
        note = Note.objects.create(run_id=self.run_id, title=title, body="written by slow_note")
        time.sleep(seconds)
        return {"note_id": note.pk}


class StubbornWait:
    """Waits with ``time.sleep`` and takes no ``context``: a tool written before the cancel token.

    A cancel cannot interrupt it; the run stops at the boundary after it, as tools always did.
    ``started`` (an optional ``threading.Event``, set by tests) is set when it begins.
    """

    name = "stubborn"
    description = "Wait the given seconds, ignoring any cancel (a tool that predates the cancel token)."
    parameters = {
        "type": "object",
        "properties": {"seconds": {"type": "number", "minimum": 0, "maximum": 30}},
        "required": ["seconds"],
    }
    requires_approval = False
    started: Any = None

    def __init__(self, run_id: uuid.UUID | None = None) -> None:
        self.run_id = run_id

    def execute(self, arguments: dict[str, Any]) -> Any:
        seconds = arguments.get("seconds")
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds <= 30:
            raise ToolError("seconds must be a number from 0 to 30")
        if self.started is not None:
            self.started.set()
        time.sleep(seconds)
        return {"waited": seconds}
