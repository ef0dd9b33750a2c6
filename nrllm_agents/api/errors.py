"""Error bodies: every error is JSON with ``detail``, or (400) field -> list of messages.

Which status and ``detail`` a domain error or a policy refusal gets is ``http.answers``'s; this
is DRF's hook that asks it."""

from __future__ import annotations

from typing import Any

from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from ..http import answers


def flatten_errors(errors: Any, prefix: str = "") -> list[str]:
    """Nested DRF errors (list items, nested objects) as flat messages naming where they are.

    ``{"0": ["Must be a valid UUID."]}`` becomes ``["[0]: Must be a valid UUID."]``.
    """
    if isinstance(errors, dict):
        return [
            m
            for key, value in errors.items()
            for m in flatten_errors(value, f"{prefix}[{key}]" if str(key).isdigit() else f"{prefix}.{key}")
        ]
    if isinstance(errors, list):
        if all(isinstance(e, str) for e in errors):
            return [f"{prefix.lstrip('.')}: {e}" if prefix else str(e) for e in errors]
        return [m for i, e in enumerate(errors) for m in flatten_errors(e, f"{prefix}[{i}]") if e]
    return [f"{prefix.lstrip('.')}: {errors}" if prefix else str(errors)]


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """``http.answers`` for a policy refusal or a domain error, else DRF's handler, with 400
    bodies flattened to field -> list of strings.

    A domain error does not roll back the request's transaction: what the runtime settled
    before raising (a run marked ``failed`` by a refused enqueue) stays.
    """
    answer = answers.for_error(exc)
    if answer is not None:
        return Response(answer.body, status=answer.status, headers=answer.headers or None)
    response = drf_exception_handler(exc, context)
    if (
        response is not None
        and response.status_code == 400
        and isinstance(response.data, dict)
        and "detail" not in response.data
    ):  # an unreadable body keeps its one detail
        response.data = {
            field: [messages] if isinstance(messages, str) else flatten_errors(messages)
            for field, messages in response.data.items()
        }
    return response
