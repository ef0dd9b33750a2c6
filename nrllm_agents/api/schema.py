"""OpenAPI pieces shared by the views: the documented error answers and the schema's settings."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse

from . import serializers as s

# Served with the schema (``SpectacularAPIView(custom_settings=...)``): one name per shared choice set.
SCHEMA_SETTINGS: dict[str, Any] = {
    "ENUM_GENERATE_CHOICE_DESCRIPTION": False,
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "nrllm_agents.models.RunStatus",
        "TerminationReasonEnum": "nrllm_agents.models.TerminationReason",
        "CancelSourceEnum": "nrllm_agents.models.CancelSource",
        "ConnectionKindEnum": "nrllm_agents.models.ConnectionKind",
    },
}

RUN_ID = OpenApiParameter("id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The run's id.")

AUTH_ERRORS: dict[int, Any] = {
    401: OpenApiResponse(s.ErrorSerializer, "Not authenticated (send `Authorization: Token ...`, or log in)."),
    403: OpenApiResponse(s.ErrorSerializer, "Authenticated, but not allowed (e.g. a session without its CSRF token)."),
}
BAD_REQUEST: dict[int, Any] = {400: OpenApiResponse(s.ValidationErrorSerializer, "Invalid input.")}
NOT_FOUND: dict[int, Any] = {
    404: OpenApiResponse(s.ErrorSerializer, "Unknown run, a run the caller may not see, or a malformed id."),
}
THROTTLED: dict[int, Any] = {
    429: OpenApiResponse(
        s.ErrorSerializer, "Too many requests, or too many sync runs executing for this caller; see Retry-After."
    )
}
ENQUEUE_FAILED: dict[int, Any] = {
    503: OpenApiResponse(s.EnqueueFailedSerializer, "The queue is unavailable; the run was marked failed."),
}


class ValidationErrorExtension(OpenApiSerializerExtension):
    """Documents ``ValidationErrorSerializer``: an object of field -> messages (see ``errors``)."""

    target_class = s.ValidationErrorSerializer

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
