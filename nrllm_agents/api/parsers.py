"""The API's JSON parser: bounded in size and nesting before anything is parsed.

DRF's ``JSONParser`` reads the whole body (Django's ``DATA_UPLOAD_MAX_MEMORY_SIZE`` does not
apply to a stream read by DRF) and hands it to ``json.loads``, which raises ``RecursionError``
(a 500) on deeply nested input. This parser reads at most the size limit (413 beyond), then
checks the nesting depth of the raw text iteratively (400 beyond), and only then parses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from rest_framework import status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import JSONParser

from ..domain import jsonlimits


class RequestTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "request_too_large"


def body_limit() -> int | None:
    """Bytes a request body may hold (``DATA_UPLOAD_MAX_MEMORY_SIZE``; ``None``: no limit)."""
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE


def too_large_detail(limit: int) -> str:
    return f"The request body is larger than {limit} bytes."


class BoundedJSONParser(JSONParser):
    """``JSONParser`` with a size limit (413) and a depth limit (400), both checked first."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        limit = body_limit()
        raw = stream.read() if limit is None else stream.read(limit + 1)
        if limit is not None and len(raw) > limit:
            raise RequestTooLarge(too_large_detail(limit))
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            return jsonlimits.loads(raw.decode(encoding))
        except UnicodeDecodeError:
            raise ParseError(f"JSON parse error - the body is not valid {encoding}") from None
        except jsonlimits.JSONRefused as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
