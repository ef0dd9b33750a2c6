"""The ``?cursor=`` of the API's lists: a page's position in its ordering, opaque to clients.

A cursor holds the ordering's value and the primary key of the row a page starts after (or
before, for a ``previous`` link), as URL-safe base64 of a small JSON object. It carries no
secret and grants nothing: the list it is applied to is still the caller's own.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from datetime import datetime

from rest_framework.exceptions import ValidationError


def encode(value: datetime, pk: uuid.UUID, *, backwards: bool) -> str:
    """The cursor of the position (``value``, ``pk``); ``backwards`` for the page before it."""
    position = {"v": value.isoformat(), "k": str(pk), "b": backwards}
    return base64.urlsafe_b64encode(json.dumps(position, separators=(",", ":")).encode()).decode().rstrip("=")


def decode(raw: str, *, name: str) -> tuple[datetime, uuid.UUID, bool]:
    """``(value, pk, backwards)`` of a cursor ``encode`` made; else a 400 naming ``name``."""
    try:
        position = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        value = datetime.fromisoformat(position["v"])
        if value.tzinfo is None:
            raise ValueError("no offset")
        return value, uuid.UUID(position["k"]), bool(position["b"])
    except (binascii.Error, UnicodeDecodeError, ValueError, TypeError, KeyError, AttributeError):
        raise ValidationError({name: ["not a position of this list: follow the `next` and `previous` links"]}) from None
