"""``/threads``: our threads, their metadata, their state and history.

A thread created here is owned by the caller (the policy then decides as for every thread).
``DELETE`` hides the thread from the protocol (404 afterwards) once none of its runs moves;
it stays, with its runs and their steps, in the API, the admin and the audit.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import IntegrityError, transaction
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from ..access import policy
from ..api.base import rejectunstorable
from ..api.throttling import CREATE_SCOPE
from ..domain.errors import Kind, KindedError
from ..models import Thread
from ..runtime import threads
from ..validation.run_request import InvalidRequest
from . import shapes
from . import state as st
from .base import ProtocolView
from .paging import page_of
from .requests import checked_metadata

SEARCH_SCAN = 5000  # threads a metadata search looks through at most


class ThreadExists(KindedError, RuntimeError):
    """A thread with this id exists (``if_exists`` said ``raise``)."""

    kind = Kind.CONFLICT

    def detail(self) -> str:
        return "A thread with this thread_id already exists."


class ThreadStillRunning(KindedError, RuntimeError):
    """A run of the thread has not stopped; cancel it first."""

    kind = Kind.CONFLICT

    def detail(self) -> str:
        return "A run of this thread has not stopped: cancel it first."


def body(request: Request) -> dict[str, Any]:
    data = request.data if request.data is not None else {}
    if not isinstance(data, dict):
        raise InvalidRequest({"body": "expected a JSON object"})
    rejectunstorable(data)
    return dict(data)


def metadata_of(data: dict[str, Any]) -> dict[str, Any] | None:
    value = data.get("metadata")
    if value is not None and not isinstance(value, dict):
        raise InvalidRequest({"metadata": "expected an object"})
    return None if value is None else checked_metadata(value)


def create(user: Any, thread_id: Any = None, metadata: dict[str, Any] | None = None) -> Thread:
    """A new thread of ``user`` (with ``thread_id`` when given); raises ``ThreadExists``."""
    pk = threads.parse_thread_id(thread_id) if thread_id is not None else uuid.uuid4()
    owner = user if getattr(user, "pk", None) else None
    try:
        with transaction.atomic():
            return Thread.objects.create(id=pk, owner=owner, metadata=metadata or {})
    except IntegrityError:
        raise ThreadExists() from None


class ThreadListView(ProtocolView):
    throttle = {"post": CREATE_SCOPE}  # the rate of /api/threads/'s create, spent from the same count

    def post(self, request: Request) -> Response:
        data = body(request)
        thread_id, if_exists = data.get("thread_id"), data.get("if_exists") or "raise"
        if if_exists not in ("raise", "do_nothing"):
            raise InvalidRequest({"if_exists": "raise or do_nothing"})
        if thread_id is not None and if_exists == "do_nothing":
            pk = threads.parse_thread_id(thread_id)
            # A deleted thread is not handed back: its id stays taken (409) by the kept thread.
            found = policy.visible_threads(request.user).filter(pk=pk, hidden_from_protocol=False).first()
            if found is not None:
                return Response(shapes.thread(found))
        thread = create(request.user, thread_id, metadata_of(data))
        return Response(shapes.thread(thread))


def merge_metadata(thread_id: Any, metadata: dict[str, Any]) -> None:
    """Merge ``metadata`` into the thread's; the merge is checked as it is kept (422 past the
    size limit): two merges cannot pass it together."""
    with transaction.atomic():
        kept = Thread.objects.select_for_update().filter(pk=thread_id).values_list("metadata", flat=True).get()
        merged = checked_metadata({**(kept or {}), **metadata})
        Thread.objects.filter(pk=thread_id).update(metadata=merged)


def labelled(metadata: dict[str, Any], key: str, value: Any) -> bool:
    """Whether a thread's ``metadata`` has ``key`` = ``value``. A ``graph_id`` also matches the
    thread's ``assistant_id``: every saved agent runs the one graph (``shapes.GRAPH_ID``), and
    a chat UI given an assistant's name where LangGraph expects a graph's (agent-chat-ui's
    history, for an ``assistantId`` that is no UUID) asks for that agent's threads."""
    if metadata.get(key) == value:
        return True
    return key == "graph_id" and metadata.get("assistant_id") == value


class ThreadSearchView(ProtocolView):
    def post(self, request: Request) -> Response:
        data = body(request)
        limit, offset = page_of(data)
        wanted, statuses = metadata_of(data) or {}, data.get("status")
        rows = policy.visible_threads(request.user).filter(hidden_from_protocol=False)
        if isinstance(data.get("ids"), list):
            rows = rows.filter(pk__in=[threads.parse_thread_id(i) for i in data["ids"]])
        order = "" if data.get("sort_order") == "asc" else "-"
        field = {"created_at": "created_at", "thread_id": "id"}.get(str(data.get("sort_by")), "last_activity_at")
        found: list[dict[str, Any]] = []
        for thread in rows.order_by(f"{order}{field}", "pk")[:SEARCH_SCAN]:
            if not all(labelled(thread.metadata or {}, k, v) for k, v in wanted.items()):
                continue
            shown = shapes.thread(thread)
            if statuses is None or shown["status"] == statuses:
                found.append(shown)
            if len(found) >= offset + limit:
                break
        return Response(found[offset : offset + limit])


class ThreadDetailView(ProtocolView):
    def get(self, request: Request, thread_id: str) -> Response:
        return Response(shapes.thread(self.get_thread(thread_id)))

    def patch(self, request: Request, thread_id: str) -> Response:
        thread = self.get_thread(thread_id, policy.Action.POST_MESSAGE)
        metadata = metadata_of(body(request))
        if metadata:
            merge_metadata(thread.pk, metadata)
        return Response(shapes.thread(Thread.objects.get(pk=thread.pk)))

    def delete(self, request: Request, thread_id: str) -> Response:
        thread = self.get_thread(thread_id, policy.Action.POST_MESSAGE)
        with transaction.atomic():
            Thread.objects.select_for_update().filter(pk=thread.pk).first()
            if thread.runs.filter(stopped_at__isnull=True).exclude(status="waiting_for_approval").exists():
                raise ThreadStillRunning()
            Thread.objects.filter(pk=thread.pk).update(hidden_from_protocol=True)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ThreadStateView(ProtocolView):
    def get(self, request: Request, thread_id: str) -> Response:
        return Response(st.state(self.get_thread(thread_id)))


class ThreadHistoryView(ProtocolView):
    def post(self, request: Request, thread_id: str) -> Response:
        thread = self.get_thread(thread_id)
        limit, _ = page_of(body(request))
        return Response(st.history(thread, limit))

    def get(self, request: Request, thread_id: str) -> Response:
        thread = self.get_thread(thread_id)
        limit, _ = page_of(request.query_params)
        return Response(st.history(thread, limit))
