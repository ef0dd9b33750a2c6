"""``/api/connections/``: model servers and their keys; the key is write-only.

A key goes in (``api_key`` on create or edit) and never comes out: answers say ``has_key``.
Every action takes staff holding the connection permission for it (``policy.may_configure``).
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from ..access import policy
from ..catalog import connections
from ..crypto.vault import VaultError
from ..models import Connection, ConnectionKind
from .base import RunAPIView, checked_body
from .fields import StrictBooleanField, StrictCharField
from .responses import ErrorSerializer
from .schema import AUTH_ERRORS, BAD_REQUEST, extend_schema

NAME = OpenApiParameter(
    "name",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    description="The connection's name.",
    pattern=r"^[-a-zA-Z0-9_]{1,100}$",
)
FORBIDDEN = "You may not do this to connections: it takes staff with the connection permission."
NOT_FOUND: dict[int, Any] = {404: OpenApiResponse(ErrorSerializer, "No connection with this name.")}


class ConnectionWriteSerializer(serializers.Serializer[Any]):
    name = StrictCharField(max_length=100, help_text="Letters, digits, - and _ (create only).")
    kind = serializers.ChoiceField(ConnectionKind.choices)
    base_url = StrictCharField(max_length=500, help_text="Where the key is sent.")
    default_model = StrictCharField(required=False, allow_blank=True, max_length=200)
    api_key = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=4000,
        write_only=True,
        help_text="Write-only: never returned. On an edit, leave it out to keep the stored key.",
    )
    clear_key = StrictBooleanField(required=False, help_text="On an edit: store no key any more.")


class ConnectionEditSerializer(ConnectionWriteSerializer):
    name = None  # type: ignore[assignment]


class ConnectionSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    kind = serializers.ChoiceField(ConnectionKind.choices)
    base_url = serializers.CharField()
    default_model = serializers.CharField(allow_blank=True)
    has_key = serializers.BooleanField(help_text="Whether a key is stored (the key itself is never shown).")
    updated_at = serializers.DateTimeField()


def _save(name: str, body: dict[str, Any], *, create: bool) -> Connection:
    key = body.get("api_key")
    try:
        row, _ = connections.save(
            name,
            kind=body["kind"],
            base_url=body["base_url"],
            default_model=body.get("default_model", ""),
            api_key=None if body.get("clear_key") else key,
            replace=not create,
            keep_key=not create and not body.get("clear_key"),
        )
    except connections.InvalidConnection as exc:
        raise ValidationError({field: [message] for field, message in exc.errors.items()}) from None
    except VaultError as exc:
        raise ValidationError({"api_key": [str(exc)]}) from None
    return row


def _allow(request: Request, action: policy.Setup) -> None:
    if not policy.may_configure(request.user, action, "connection"):
        raise PermissionDenied(FORBIDDEN)


class ConnectionListView(RunAPIView):
    @extend_schema(
        operation_id="connections_list",
        summary="List connections (never their keys)",
        description="The connections the caller may run through (as the saved agents: open ones, and those "
        "naming the caller or one of their groups; staff who may change connections: all).",
        responses={200: ConnectionSerializer(many=True), **AUTH_ERRORS, **BAD_REQUEST},
    )
    def get(self, request: Request) -> Response:
        _allow(request, policy.Setup.VIEW)
        usable = policy.usable_connections(request.user)  # only those the caller may run through
        return Response([connections.public_dict(row) for row in usable])

    @extend_schema(
        operation_id="connections_create",
        summary="Add a connection",
        request=ConnectionWriteSerializer,
        responses={201: ConnectionSerializer, **BAD_REQUEST, **AUTH_ERRORS},
    )
    def post(self, request: Request) -> Response:
        _allow(request, policy.Setup.ADD)
        body = checked_body(request, ConnectionWriteSerializer)
        row = _save(body["name"], body, create=True)
        return Response(connections.public_dict(row), status=status.HTTP_201_CREATED)


class ConnectionDetailView(RunAPIView):
    def _row(self, name: str, action: policy.Setup) -> Connection:
        _allow(self.request, action)
        # a read shows what the list shows: a connection the caller may not run through is not found
        rows = policy.usable_connections(self.request.user) if action == policy.Setup.VIEW else Connection.objects
        row = rows.filter(name=name).first()
        if row is None:
            raise NotFound("No connection with this name.")
        return row

    @extend_schema(
        operation_id="connections_retrieve",
        summary="A connection (never its key)",
        parameters=[NAME],
        responses={200: ConnectionSerializer, **AUTH_ERRORS, **NOT_FOUND, **BAD_REQUEST},
    )
    def get(self, request: Request, name: str) -> Response:
        return Response(connections.public_dict(self._row(name, policy.Setup.VIEW)))

    @extend_schema(
        operation_id="connections_edit",
        summary="Change a connection (its key only when given)",
        parameters=[NAME],
        request=ConnectionEditSerializer,
        responses={200: ConnectionSerializer, **BAD_REQUEST, **AUTH_ERRORS, **NOT_FOUND},
    )
    def put(self, request: Request, name: str) -> Response:
        row = self._row(name, policy.Setup.CHANGE)
        body = checked_body(request, ConnectionEditSerializer)
        return Response(connections.public_dict(_save(row.name, body, create=False)))

    @extend_schema(
        operation_id="connections_destroy",
        summary="Remove a connection and its prices",
        parameters=[NAME],
        responses={204: None, **AUTH_ERRORS, **NOT_FOUND, **BAD_REQUEST},
    )
    def delete(self, request: Request, name: str) -> Response:
        connections.remove(self._row(name, policy.Setup.DELETE).name)
        return Response(status=status.HTTP_204_NO_CONTENT)
