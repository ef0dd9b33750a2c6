"""Tools that need Django."""

from __future__ import annotations

import uuid
from typing import Any

from ..domain import ToolError


class WriteNote:
    """Creates a ``Note`` row. A side effect on the world: it requires human approval."""

    name = "write_note"
    description = "Save a short note (title and body) for the operator. Requires approval."
    parameters = {
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 200},
            "body": {"type": "string", "maxLength": 10000},
        },
        "required": ["title", "body"],
        "additionalProperties": False,
    }
    requires_approval = True
    idempotent = False  # a second execution would write a second note

    def __init__(self, run_id: uuid.UUID | None = None) -> None:
        self.run_id = run_id

    def execute(self, arguments: dict[str, Any]) -> Any:
        from ..models import Note

        title, body = arguments.get("title"), arguments.get("body")
        if not isinstance(title, str) or not title.strip() or len(title) > 200:
            raise ToolError("title must be a non-empty string of at most 200 characters")
        if not isinstance(body, str) or len(body) > 10000:
            raise ToolError("body must be a string of at most 10000 characters")
        note = Note.objects.create(run_id=self.run_id, title=title.strip(), body=body)
        return {"note_id": note.pk, "title": note.title}
