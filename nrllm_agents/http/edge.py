"""Refuse at the edge what no view should ever see.

- A NUL character anywhere in the path, the query string or form fields: PostgreSQL cannot store
  it and refuses it in a filter (``?status__exact=%00`` was a 500 in the admin), so the request is
  answered 400 before any view, admin filter or form runs.
- A cookie whose value holds a NUL (Django decodes octal escapes) is dropped before the session
  and CSRF middleware read it; the request goes on as if the browser had not sent it.
- A body larger than ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (by its ``Content-Length``, on every path)
  answers 413 before any view reads it, logged as one warning line; a form body that passes
  Django's own limits only once read (too many fields) is answered the same way, never Django's
  HTML 400 with an ERROR traceback. The API's JSON parser enforces the size limit on bodies of
  unknown length.
- Every request reads the MCP catalog without waiting on a server (``mcp.catalog.without_waiting``).

Answers are JSON ``{"detail": ...}`` for the API, the Agent Protocol and for scripts (``Accept:
application/json``), a one-line plain-text page otherwise.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.urls import NoReverseMatch, reverse

from ..mcp import catalog as mcp_catalog

logger = logging.getLogger(__name__)

NUL_DETAIL = "The request contains a NUL character, which is not accepted anywhere."
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def api_prefix() -> str | None:
    """The path the REST API is mounted at (``/agents/api/``), or None where it is not mounted."""
    try:
        return reverse("nrllm_api:schema").removesuffix("schema/")
    except NoReverseMatch:
        return None


def protocol_prefix() -> str | None:
    """The path the Agent Protocol is mounted at (``/lg/``), or None where it is not mounted."""
    try:
        return reverse("nrllm_lg:openapi").removesuffix("openapi.json")
    except NoReverseMatch:
        return None


def _in_api(request: HttpRequest) -> bool:
    prefix = api_prefix()
    return prefix is not None and request.path.startswith(prefix)


def _in_protocol(request: HttpRequest) -> bool:
    prefix = protocol_prefix()
    return prefix is not None and request.path.startswith(prefix)


def _wants_json(request: HttpRequest) -> bool:
    return _in_api(request) or _in_protocol(request) or "application/json" in request.headers.get("Accept", "")


def _too_large(request: HttpRequest, detail: str) -> HttpResponse:
    logger.warning("%s %s refused (413): %s", request.method, request.path[:200], detail)
    return _refuse(request, 413, detail)


def _refuse(request: HttpRequest, status: int, detail: str) -> HttpResponse:
    if _wants_json(request):
        return JsonResponse({"detail": detail}, status=status)
    return HttpResponse(detail + "\n", status=status, content_type="text/plain; charset=utf-8")


def _has_nul(pairs: object) -> bool:
    return any("\x00" in key or any("\x00" in v for v in values if isinstance(v, str)) for key, values in pairs)  # type: ignore[attr-defined]


class EdgeGuardMiddleware:
    """See the module docstring. Place it right after ``SecurityMiddleware``."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if any("\x00" in key or "\x00" in value for key, value in request.COOKIES.items()):
            request.COOKIES = {k: v for k, v in request.COOKIES.items() if "\x00" not in k and "\x00" not in v}
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if limit is not None and _content_length(request) > limit:
            return _too_large(request, f"The request body is larger than {limit} bytes.")
        if "\x00" in request.path_info or _has_nul(request.GET.lists()):
            return _refuse(request, 400, NUL_DETAIL)
        # The API and the protocol take JSON only (their parser refuses NUL in what it stores);
        # reading a form body here would leave nothing for DRF to read.
        json_only = _in_api(request) or _in_protocol(request)
        if not json_only and request.method == "POST" and request.content_type in FORM_TYPES:
            try:
                if _has_nul(request.POST.lists()):
                    return _refuse(request, 400, NUL_DETAIL)
            except RequestDataTooBig as exc:  # a body of unknown length (ASGI) past the limit
                return _too_large(request, str(exc))
            except (MultiPartParserError, TooManyFieldsSent, TooManyFilesSent):
                return _refuse(request, 400, "The form data could not be read.")
        with mcp_catalog.without_waiting():  # no request waits on an MCP server (mcp/catalog.py)
            return self.get_response(request)


def _content_length(request: HttpRequest) -> int:
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0
