"""``POST /api/runs/{id}/fork/``: continue a stopped run from one of its steps as a new run.

Gated like starting a run (an authenticated caller, the create throttle) plus visibility of
the parent: a parent the caller may not see answers 404 like a missing one.
"""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.utils import OpenApiResponse
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from ..runtime.forks import provider_of
from . import responses as r
from . import serializers as s
from .base import RunAPIView, checked_body, refuse_provider, sync_slot
from .schema import AUTH_ERRORS, BAD_REQUEST, ENQUEUE_FAILED, NOT_FOUND, RUN_ID, STARTS, THROTTLED, extend_schema
from .throttling import CREATE_SCOPE


class RunForkView(RunAPIView):
    post_throttle_scope = CREATE_SCOPE

    @extend_schema(
        operation_id="runs_fork",
        summary="Fork a stopped run",
        parameters=[RUN_ID],
        request=s.ForkRequestSerializer,
        description="Start a NEW run whose transcript is this run's up to and including step `from_sequence`, "
        "rebuilt from its stored stream; every tool call without a recorded answer gets an explicit "
        "one. The new run's first step is `forked` (parent id and sequence); the parent is not "
        "changed. Anything not overridden is copied from the parent. Queued (202) or executed "
        "here (`mode` sync: 201).",
        responses={
            202: OpenApiResponse(r.RunOutcomeSerializer, "Queued: a worker runs the fork."),
            201: OpenApiResponse(r.RunOutcomeSerializer, "Executed here: the fork and its outcome."),
            409: OpenApiResponse(
                r.ConflictSerializer, "The run has not stopped yet (queued, running, waiting): nothing to fork."
            ),
            **BAD_REQUEST,
            **AUTH_ERRORS,
            **STARTS,
            **NOT_FOUND,
            **THROTTLED,
            **ENQUEUE_FAILED,
        },
    )
    def post(self, request: Request, id: str) -> Response:
        parent = self.get_run(id)
        overrides = checked_body(request, s.ForkRequestSerializer)
        mode = overrides.pop("mode", "queued")
        from_sequence = overrides.pop("from_sequence", None)
        refuse_provider(provider_of(parent, overrides))
        slot = sync_slot(request) if mode == "sync" else None
        try:  # an invalid request, a parent deleted or not stopped, a refused enqueue: ``http.answers``
            result = self.runtime.fork(
                parent.pk, from_sequence=from_sequence, overrides=overrides, owner=request.user, queued=mode != "sync"
            )
        finally:
            if slot is not None:
                slot.release()
        code = status.HTTP_201_CREATED if mode == "sync" else status.HTTP_202_ACCEPTED
        body: dict[str, Any] = {**self.fresh(result.run_id), "outcome": result.outcome.value}
        return Response(body, status=code, headers={"Location": reverse("nrllm_api:run-detail", args=[result.run_id])})
