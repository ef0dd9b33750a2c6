"""OpenAPI pieces shared by the views: the documented error answers and the schema's settings."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from drf_spectacular import utils as spectacular
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse

from . import responses as r

# Served with the schema (``SpectacularAPIView(custom_settings=...)``): one name per shared choice set.
SCHEMA_SETTINGS: dict[str, Any] = {
    "TITLE": "nrllm_agents API",
    "DESCRIPTION": "Start, inspect, approve and cancel durable LLM agent runs.",
    "VERSION": "1.0.0",
    "ENUM_GENERATE_CHOICE_DESCRIPTION": False,
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "nrllm_agents.models.RunStatus",
        "TerminationReasonEnum": "nrllm_agents.models.TerminationReason",
        "CancelSourceEnum": "nrllm_agents.models.CancelSource",
        "ConnectionKindEnum": "nrllm_agents.models.ConnectionKind",
    },
    "PREPROCESSING_HOOKS": ["nrllm_agents.api.schema.only_this_api"],
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "nrllm_agents.api.schema.add_stream_path",
    ],
}


def only_this_api(endpoints: list[tuple[Any, ...]], **kwargs: Any) -> list[tuple[Any, ...]]:
    """A preprocessing hook: the schema holds this API's views, not the host's own DRF views nor
    the schema and docs views (which the host's DEFAULT_SCHEMA_CLASS, not ours, annotates)."""
    return [
        endpoint
        for endpoint in endpoints
        if getattr(endpoint[-1], "cls", None) is not None
        and endpoint[-1].cls.__module__.startswith("nrllm_agents.api.")
        and not endpoint[-1].cls.__module__.startswith("nrllm_agents.api.urls")
    ]


def extend_schema(**kwargs: Any) -> Callable[[Any], Any]:
    """drf-spectacular's ``extend_schema``, on drf-spectacular's inspector whatever the host's
    ``DEFAULT_SCHEMA_CLASS`` (on a view method the decorator would extend that setting's class,
    DRF's own in a host that never configured drf-spectacular)."""
    decorate = spectacular.extend_schema(**kwargs)

    def decorator(f: Any) -> Any:
        if not inspect.isclass(f) and getattr(f, "schema", None) is None:
            f.schema = AutoSchema
        return decorate(f)

    return decorator


RUN_ID = OpenApiParameter("id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The run's id.")

AUTH_ERRORS: dict[int, Any] = {
    401: OpenApiResponse(r.ErrorSerializer, "Not authenticated (send `Authorization: Token ...`, or log in)."),
    403: OpenApiResponse(r.ErrorSerializer, "Authenticated, but not allowed (e.g. a session without its CSRF token)."),
}
STARTS: dict[int, Any] = {  # after AUTH_ERRORS, for an operation that starts a run
    403: OpenApiResponse(
        r.ErrorSerializer,
        "Not allowed: the caller may not use the saved agent or the connection the run names (`detail` names "
        "it, and `agent` or `connection` holds its name; nothing was started), or a session without its CSRF token.",
    ),
}
BAD_REQUEST: dict[int, Any] = {400: OpenApiResponse(r.ValidationErrorSerializer, "Invalid input.")}
NOT_FOUND: dict[int, Any] = {
    404: OpenApiResponse(r.ErrorSerializer, "Unknown run, a run the caller may not see, or a malformed id."),
}
THROTTLED: dict[int, Any] = {
    429: OpenApiResponse(
        r.ErrorSerializer, "Too many requests, or too many sync runs executing for this caller; see Retry-After."
    )
}
ENQUEUE_FAILED: dict[int, Any] = {
    503: OpenApiResponse(r.EnqueueFailedSerializer, "The queue is unavailable; the run was marked failed."),
}


# (drf-spectacular ships no types: its __init_subclass__ reads as untyped)
class ValidationErrorExtension(OpenApiSerializerExtension):  # type: ignore[no-untyped-call]
    """Documents ``ValidationErrorSerializer``: an object of field -> messages (see ``errors``)."""

    target_class = r.ValidationErrorSerializer

    def get_name(self, auto_schema: Any, direction: Any) -> str:
        return "ValidationError"

    def map_serializer(self, auto_schema: Any, direction: Any) -> dict[str, Any]:
        return {
            "type": "object",
            "description": "`detail` when the body cannot be read; otherwise each bad field with its "
            "messages (`non_field_errors` for the body as a whole; a message about a list "
            "item or nested field starts with where it is, e.g. `[1].delay: ...`).",
            "properties": {"detail": {"type": "string"}},
            "additionalProperties": {"type": "array", "items": {"type": "string"}},
        }


STREAM_DESCRIPTION = (
    "The run's steps as Server-Sent Events (`text/event-stream`), for browsers (`EventSource`) and "
    "scripts. Each recorded step is `event: step` with `id: <sequence>` and the step (with `details`, "
    "its labelled lines) as `data`; while a model call streams, `event: delta` frames (no `id`) carry "
    '`{"run_id", "round", "text", "offset"}`; once the run is done (or waits for approval) a final '
    "`done` / `cancelled` / `awaiting_approval` / `failed` event carries the run's status and the "
    "stream closes. A reconnect resumes after `Last-Event-ID` (or `?after=`): no step twice, none "
    "skipped. `: keepalive` comments keep an idle connection open. Served by `api/stream.py`, a plain "
    "Django view, so it is added to this document by a hook."
)


def add_stream_path(result: dict[str, Any], generator: Any, request: Any, public: Any) -> dict[str, Any]:
    """A postprocessing hook: documents ``GET <api>/runs/{id}/stream/`` (``api/stream.py``)."""
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    # beside the run's other paths, under whatever prefix the host mounted the API at
    paths = result.setdefault("paths", {})
    cancel = next((p for p in paths if p.endswith("/runs/{id}/cancel/")), "/api/runs/{id}/cancel/")
    paths[cancel.removesuffix("cancel/") + "stream/"] = {
        "get": {
            "operationId": "runs_stream",
            "summary": "Follow a run live (Server-Sent Events)",
            "description": STREAM_DESCRIPTION,
            "tags": ["runs"],
            "parameters": [
                {"name": "id", "in": "path", "required": True, "schema": {"type": "string", "format": "uuid"}},
                {
                    "name": "after",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": -1},
                    "description": "Send the steps after this sequence (-1: from the start).",
                },
                {
                    "name": "Last-Event-ID",
                    "in": "header",
                    "schema": {"type": "integer", "minimum": -1},
                    "description": "Sent by EventSource on a reconnect; wins over `after`.",
                },
            ],
            "responses": {
                "200": {
                    "description": "The event stream.",
                    "content": {"text/event-stream": {"schema": {"type": "string"}}},
                },
                "400": {"description": "`after` / `Last-Event-ID` is not a step sequence.", "content": error},
                "401": {"description": "Not authenticated.", "content": error},
                "404": {"description": "Unknown run, or one the caller may not see.", "content": error},
                "429": {"description": "Too many open streams; see Retry-After.", "content": error},
            },
        }
    }
    return result
