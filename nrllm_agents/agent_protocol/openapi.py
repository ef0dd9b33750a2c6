"""The protocol's OpenAPI 3.1 document (``/lg/openapi.json``): the part of the Agent Protocol
served here, with the shapes this server answers. Written out, not generated: the views read
bodies the protocol defines rather than DRF serializers. ``tests/e2e/agent_protocol`` checks
every request the SDKs make, and every answer, against it.
"""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from .. import __version__
from . import requests
from .base import ProtocolView

JSON = "application/json"
NULLABLE_STRING = {"type": ["string", "null"]}
ANY_OBJECT = {"type": "object"}
RUN_STATUSES = ["pending", "running", "error", "success", "timeout", "interrupted"]
STRATEGIES = ["reject", "enqueue", "interrupt", "rollback"]
STREAM_MODES = list(requests.STREAM_MODES)


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(required: list[str], **properties: Any) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": properties}


SCHEMAS: dict[str, Any] = {
    "Error": obj(["detail"], detail={"type": "string"}),
    "Message": obj(["type", "content"], type={"type": "string"}, content={}, id=NULLABLE_STRING),
    "Values": obj(["messages"], messages={"type": "array", "items": ref("Message")}),
    "Interrupt": obj(["value", "id"], value={}, id={"type": "string"}),
    "Assistant": obj(
        ["assistant_id", "graph_id", "name", "config", "metadata", "version", "created_at", "updated_at"],
        assistant_id={"type": "string"},
        graph_id={"type": "string"},
        name={"type": "string"},
        description=NULLABLE_STRING,
        config=ANY_OBJECT,
        context=ANY_OBJECT,
        metadata=ANY_OBJECT,
        version={"type": "integer"},
        created_at={"type": "string", "format": "date-time"},
        updated_at={"type": "string", "format": "date-time"},
    ),
    "Thread": obj(
        ["thread_id", "created_at", "updated_at", "metadata", "status", "values", "interrupts"],
        thread_id={"type": "string", "format": "uuid"},
        created_at={"type": "string", "format": "date-time"},
        updated_at={"type": "string", "format": "date-time"},
        metadata=ANY_OBJECT,
        status={"enum": ["idle", "busy", "interrupted", "error"]},
        values=ref("Values"),
        interrupts={"type": "object", "additionalProperties": {"type": "array", "items": ref("Interrupt")}},
    ),
    "ThreadState": obj(
        ["values", "next", "tasks", "checkpoint", "metadata", "created_at", "interrupts"],
        values=ref("Values"),
        next={"type": "array", "items": {"type": "string"}},
        tasks={"type": "array", "items": ANY_OBJECT},
        checkpoint=ANY_OBJECT,
        metadata=ANY_OBJECT,
        created_at=NULLABLE_STRING,
        parent_checkpoint={"type": ["object", "null"]},
        interrupts={"type": "array", "items": ref("Interrupt")},
    ),
    "Run": obj(
        ["run_id", "thread_id", "assistant_id", "created_at", "updated_at", "status", "metadata", "multitask_strategy"],
        run_id={"type": "string", "format": "uuid"},
        thread_id={"type": "string", "format": "uuid"},
        assistant_id={"type": "string"},
        created_at={"type": "string", "format": "date-time"},
        updated_at={"type": "string", "format": "date-time"},
        status={"enum": RUN_STATUSES},
        metadata=ANY_OBJECT,
        multitask_strategy={"enum": STRATEGIES},
        kwargs=ANY_OBJECT,
        cancel_reason=NULLABLE_STRING,
    ),
    "RunCreate": obj(
        ["assistant_id"],
        assistant_id={"type": "string", "description": "A saved agent's name."},
        input={"type": ["object", "null"], "properties": {"messages": {"type": "array"}}},
        command={"type": ["object", "null"], "properties": {"resume": {}}},
        config={"type": ["object", "null"]},
        context={"type": ["object", "null"], "description": "The run's own fields (model, max_cost, script, ...)."},
        metadata={"type": ["object", "null"]},
        stream_mode={"anyOf": [{"enum": STREAM_MODES}, {"type": "array", "items": {"enum": STREAM_MODES}}]},
        multitask_strategy={"enum": STRATEGIES},
        if_not_exists={"enum": ["create", "reject"]},
        stream_subgraphs={"type": "boolean"},
        stream_resumable={"type": "boolean"},
        on_disconnect={"enum": ["cancel", "continue"]},
        checkpoint={"type": ["object", "null"], "description": "Only the thread's latest checkpoint."},
        checkpoint_id={"type": ["string", "null"], "description": "Only the thread's latest checkpoint."},
        on_completion={"type": "string"},
        durability={"type": "string"},
    ),
    "ThreadCreate": obj(
        [],
        thread_id={"type": "string", "format": "uuid"},
        metadata=ANY_OBJECT,
        if_exists={"enum": ["raise", "do_nothing"]},
    ),
    "ThreadPatch": obj([], metadata=ANY_OBJECT),
    "Info": obj(
        ["version", "flags"],
        version={"type": "string"},
        langgraph_py_version=NULLABLE_STRING,
        flags={"type": "object", "additionalProperties": {"type": "boolean"}},
        host={"type": ["object", "null"]},
    ),
    "Search": obj(
        [],
        limit={"type": "integer", "minimum": 1, "maximum": 1000},
        offset={"type": "integer", "minimum": 0},
        metadata=ANY_OBJECT,
        ids={"type": "array", "items": {"type": "string"}},
        status={"type": "string"},
        sort_by={"type": "string"},
        sort_order={"enum": ["asc", "desc"]},
        name={"type": "string"},
        graph_id={"type": "string"},
    ),
}

ERRORS = {
    str(code): {"description": text, "content": {JSON: {"schema": ref("Error")}}}
    for code, text in [
        (401, "No credentials"),
        (403, "Not allowed"),
        (404, "Not found"),
        (409, "Conflict"),
        (422, "Invalid body"),
        (429, "Too many"),
    ]
}
SSE = {"200": {"description": "Server-sent events", "content": {"text/event-stream": {"schema": {"type": "string"}}}}}


def op(summary: str, answer: Any = None, body: str | None = None, *, stream: bool = False) -> dict[str, Any]:
    operation: dict[str, Any] = {"summary": summary, "responses": dict(ERRORS)}
    if stream:
        operation["responses"].update(SSE)
    elif answer is None:
        operation["responses"]["204"] = {"description": "Done"}
    else:
        operation["responses"]["200"] = {"description": "OK", "content": {JSON: {"schema": answer}}}
        operation["responses"]["202"] = operation["responses"]["200"]
    if body is not None:
        operation["requestBody"] = {"required": False, "content": {JSON: {"schema": ref(body)}}}
    return operation


def many(name: str) -> dict[str, Any]:
    return {"type": "array", "items": ref(name)}


T, R = "/threads/{thread_id}", "/threads/{thread_id}/runs/{run_id}"
PATHS: dict[str, Any] = {
    "/info": {"get": {**op("The server's version and features", ref("Info")), "security": []}},
    "/assistants/search": {"post": op("Search assistants", many("Assistant"), "Search")},
    "/assistants/{assistant_id}": {"get": op("Get an assistant", ref("Assistant"))},
    "/assistants/{assistant_id}/schemas": {"get": op("An assistant's schemas", ANY_OBJECT)},
    "/threads": {"post": op("Create a thread", ref("Thread"), "ThreadCreate")},
    "/threads/search": {"post": op("Search threads", many("Thread"), "Search")},
    T: {
        "get": op("Get a thread", ref("Thread")),
        "patch": op("Update a thread's metadata", ref("Thread"), "ThreadPatch"),
        "delete": op("Delete a thread (hidden from the protocol)"),
    },
    f"{T}/state": {"get": op("A thread's state", ref("ThreadState"))},
    f"{T}/history": {
        "get": op("A thread's history", many("ThreadState")),
        "post": op("A thread's history", many("ThreadState"), "Search"),
    },
    f"{T}/runs": {"get": op("List runs", many("Run")), "post": op("Create a run", ref("Run"), "RunCreate")},
    f"{T}/runs/stream": {"post": op("Create a run and stream it", body="RunCreate", stream=True)},
    f"{T}/runs/wait": {"post": op("Create a run and wait for it", ANY_OBJECT, "RunCreate")},
    R: {"get": op("Get a run", ref("Run")), "delete": op("Delete a run (hidden from the protocol)")},
    f"{R}/cancel": {"post": op("Cancel a run", ref("Run"))},
    f"{R}/join": {"get": op("Wait for a run", ANY_OBJECT)},
    f"{R}/stream": {"get": op("Stream a run", stream=True)},
    "/runs": {"post": op("Create a threadless run", ref("Run"), "RunCreate")},
    "/runs/stream": {"post": op("Create a threadless run and stream it", body="RunCreate", stream=True)},
    "/runs/wait": {"post": op("Create a threadless run and wait for it", ANY_OBJECT, "RunCreate")},
}


def document(server: str = "/lg") -> dict[str, Any]:
    """The OpenAPI document, its server being where the protocol is mounted."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "nrllm_agents: the Agent Protocol", "version": "1"},
        "servers": [{"url": server}],
        "paths": PATHS,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"}},
        },
        "security": [{"apiKey": []}],
    }


def info() -> dict[str, Any]:
    """What langgraph-api's ``/info`` answers, for this server: its version and the features a
    client may use (assistants yes; crons, LangSmith and strict resumes no)."""
    return {
        "version": __version__,
        "langgraph_py_version": None,
        "flags": {"assistants": True, "crons": False, "langsmith": False, "strict_resume": False},
        "host": None,
    }


class InfoView(ProtocolView):
    """``GET /info``, without credentials as langgraph-api answers it (a chat UI asks it first,
    before its user gave a key): a version and flags, nothing of any user's."""

    permission_classes = [AllowAny]

    def get(self, request: Request) -> Response:
        return Response(info())


class OpenAPIView(ProtocolView):
    def get(self, request: Request) -> Response:
        return Response(document(request.path.rsplit("/openapi.json", 1)[0]))
