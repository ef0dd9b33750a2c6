"""``/api/threads/``: conversations whose runs follow a multitask strategy (``threads.py``).

A thread is owned like a run and the same policy decides: a thread the caller may not see
answers 404 like a missing one (and a malformed id); posting a message is its owner's alone
(403 for staff who only see it). A message post is throttled like starting a run.
"""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import generics, status
from rest_framework.request import Request
from rest_framework.response import Response

from ..access import policy
from ..http import answers
from ..models import ACTIVE, Thread
from ..runtime import threads
from ..validation.run_request import RunRequest
from . import responses as r
from . import serializers as s
from .base import RunAPIView, RunPagination, checked_body, refuse_provider
from .schema import AUTH_ERRORS, BAD_REQUEST, ENQUEUE_FAILED, NOT_FOUND, STARTS, THROTTLED, extend_schema
from .throttling import CREATE_SCOPE

THREAD_ID = OpenApiParameter("id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The thread's id.")


def thread_representation(thread: Thread, *, detail: bool = False) -> dict[str, Any]:
    """A thread as the API shows it; with ``detail`` its runs and the transcript its next run sees."""
    runs = list(thread.runs.order_by("thread_position"))
    busy = next((r.pk for r in runs if r.status in ACTIVE), None)
    body: dict[str, Any] = {
        "thread_id": str(thread.pk),
        "title": thread.title,
        "owner": thread.owner.get_username() if thread.owner is not None else None,
        "created_at": thread.created_at.isoformat(),
        "last_activity_at": thread.last_activity_at.isoformat(),
        "busy": str(busy) if busy else None,
    }
    if detail:
        messages, source = threads.transcript(thread.pk)
        body["runs"] = [
            {
                "run_id": str(r.pk),
                "position": r.thread_position,
                "prompt": r.prompt,
                "status": r.status,
                "termination_reason": r.termination_reason or None,
                "multitask_strategy": r.multitask_strategy or None,
                "rolled_back": r.rolled_back,
                "final_text": r.final_text or None,
                "purged_at": r.purged_at.isoformat() if r.purged_at else None,
            }
            for r in runs
        ]
        body["messages"] = messages
        body["messages_from"] = str(source) if source else None
        body["purged_turns"] = sum(1 for r in runs if r.purged_at is not None)
    return body


class ThreadAPIView(RunAPIView):
    def get_thread(self, thread_id: str, action: policy.Action = policy.Action.SEE) -> Thread:
        """The thread if the policy lets the caller ``action`` it: 404 hidden, 403 forbidden."""
        pk = threads.parse_thread_id(thread_id)  # ThreadNotFound: answered 404 like an unknown thread
        thread = policy.visible_threads(self.request.user).filter(pk=pk).first()
        refused = answers.refusal(
            policy.verdict(self.request.user, action, thread), action, not_found=answers.THREAD_NOT_FOUND
        )
        if refused is not None:
            raise answers.Refused(refused)
        assert thread is not None
        return thread


class ThreadListCreateView(generics.ListAPIView[Thread], ThreadAPIView):
    """``GET /api/threads/`` (most recently active first) and ``POST /api/threads/``."""

    serializer_class = r.ThreadSerializer
    pagination_class = RunPagination
    post_throttle_scope = CREATE_SCOPE

    def get_queryset(self) -> Any:
        return policy.visible_threads(self.request.user).order_by("-last_activity_at", "-pk")

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response([thread_representation(t) for t in page or []])

    @extend_schema(
        operation_id="threads_list",
        summary="List threads",
        description="The caller's threads (staff: all), most recently active first.",
        responses={
            200: r.ThreadSerializer(many=True),
            **BAD_REQUEST,
            **AUTH_ERRORS,
            404: OpenApiResponse(r.ErrorSerializer, "No such page."),
        },
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    @extend_schema(
        operation_id="threads_create",
        summary="Start a thread",
        request=s.CreateThreadSerializer,
        responses={201: r.ThreadSerializer, **BAD_REQUEST, **AUTH_ERRORS, **THROTTLED},
    )
    def post(self, request: Request) -> Response:
        body = s.CreateThreadSerializer(data=checked_body(request, s.CreateThreadSerializer))
        body.is_valid(raise_exception=True)
        thread = threads.create(owner=request.user, title=body.validated_data["title"])
        return Response(
            thread_representation(thread),
            status=status.HTTP_201_CREATED,
            headers={"Location": reverse("nrllm_api:thread-detail", args=[thread.pk])},
        )


class ThreadDetailView(ThreadAPIView):
    @extend_schema(
        operation_id="threads_retrieve",
        summary="Show a thread",
        parameters=[THREAD_ID],
        description="Its runs in message order (rolled-back ones too, marked) and `messages`: the "
        "transcript the thread's next run starts from.",
        responses={200: r.ThreadDetailSerializer, **AUTH_ERRORS, **NOT_FOUND},
    )
    def get(self, request: Request, id: str) -> Response:
        return Response(thread_representation(self.get_thread(id), detail=True))


class ThreadMessageView(ThreadAPIView):
    post_throttle_scope = CREATE_SCOPE  # the create endpoint's throttle: a message starts a run

    @extend_schema(
        operation_id="threads_post_message",
        summary="Post a message to a thread",
        parameters=[THREAD_ID],
        request=s.MessageRequestSerializer,
        description="Queue a run that answers `prompt` from the thread's transcript. While a run of "
        "the thread is still queued, running or waiting, `multitask_strategy` decides: `reject` "
        "(409, nothing created), `enqueue` (the run waits its turn), `interrupt` (the active run is "
        "cancelled, source system, `interrupted_by_message`; its partial turn stays) or `rollback` "
        "(the same, and its turn leaves the transcript; the run and its steps stay, marked).",
        responses={
            202: OpenApiResponse(r.RunSerializer, "Queued: the run that answers the message."),
            409: OpenApiResponse(r.ThreadBusySerializer, "reject: a run of the thread is still active."),
            **BAD_REQUEST,
            **AUTH_ERRORS,
            **STARTS,
            **NOT_FOUND,
            **THROTTLED,
            **ENQUEUE_FAILED,
        },
    )
    def post(self, request: Request, id: str) -> Response:
        thread = self.get_thread(id, policy.Action.POST_MESSAGE)
        fields = checked_body(request, s.MessageRequestSerializer)
        strategy = fields.pop("multitask_strategy", None)
        # an invalid request, a thread purged in between, a busy one (reject), a refused enqueue:
        # answered by the handler (``http.answers``)
        run_request = RunRequest.from_mapping(fields, viewer=request.user)
        refuse_provider(run_request.provider)
        run_id = self.runtime.post(thread.pk, run_request, owner=request.user, strategy=strategy)
        return Response(
            self.fresh(run_id),
            status=status.HTTP_202_ACCEPTED,
            headers={"Location": reverse("nrllm_api:run-detail", args=[run_id])},
        )
