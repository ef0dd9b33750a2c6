"""Every request the SDKs make, and every answer, checked against ``/lg/openapi.json``.

The SDK's own ``httpx`` client gets a response hook that records each exchange; at the end
of the test each one must be an operation of the document, its JSON body valid against the
operation's request schema, its status documented, and its JSON answer valid against the
schema of that status (JSON Schema 2020-12, with the document's components for ``$ref``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jsonschema import Draft202012Validator

if TYPE_CHECKING:
    import httpx


@dataclass
class Exchange:
    method: str
    path: str
    body: Any
    status: int
    answer: Any


@dataclass
class Recorder:
    prefix: str
    seen: list[Exchange] = field(default_factory=list)

    def hook(self, response: httpx.Response) -> None:
        request = response.request
        raw = request.content
        answer = None
        if response.headers.get("content-type", "").startswith("application/json"):
            response.read()
            answer = json.loads(response.content) if response.content else None
        path = request.url.path.removeprefix(self.prefix)
        self.seen.append(Exchange(request.method, path, json.loads(raw) if raw else None, response.status_code, answer))

    async def ahook(self, response: httpx.Response) -> None:
        request = response.request
        answer = None
        if response.headers.get("content-type", "").startswith("application/json"):
            await response.aread()
            answer = json.loads(response.content) if response.content else None
        raw = request.content
        path = request.url.path.removeprefix(self.prefix)
        self.seen.append(Exchange(request.method, path, json.loads(raw) if raw else None, response.status_code, answer))


def _template(path: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", path) + "$")


def _valid(document: dict[str, Any], schema: dict[str, Any], value: Any) -> list[str]:
    validator = Draft202012Validator({**schema, "components": document["components"]})
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(value)]


def problems(document: dict[str, Any], seen: list[Exchange]) -> list[str]:
    """What in ``seen`` the document does not describe."""
    found: list[str] = []
    templates = [(_template(p), p) for p in document["paths"]]
    for ex in seen:
        where = f"{ex.method} {ex.path} -> {ex.status}"
        match = next((p for pattern, p in templates if pattern.match(ex.path)), None)
        operation = document["paths"].get(match, {}).get(ex.method.lower()) if match else None
        if operation is None:
            found.append(f"{where}: no such operation")
            continue
        if ex.body is not None:
            body_schema = operation.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            if body_schema is None:
                found.append(f"{where}: a body the operation does not take")
            else:
                found += [f"{where}: request {e}" for e in _valid(document, body_schema, ex.body)]
        answer = operation["responses"].get(str(ex.status))
        if answer is None:
            found.append(f"{where}: undocumented status")
            continue
        schema = answer.get("content", {}).get("application/json", {}).get("schema")
        if schema is not None and ex.answer is not None:
            found += [f"{where}: answer {e}" for e in _valid(document, schema, ex.answer)]
    return found
