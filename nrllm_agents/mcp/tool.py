"""An MCP server's tool as one of our tools: the adapter the tool loop calls.

Its name is namespaced by server (``names.py``), its parameters are the tool's ``inputSchema``
(arguments are checked against it before anything is sent), and its annotations set the
defaults: ``destructiveHint`` → approval required (unless the server's ``approval`` setting
says otherwise); ``readOnlyHint`` or ``idempotentHint`` → idempotent (the runtime may repeat it
after a lost worker; any other MCP tool gets a write fence). A result is recorded as its text,
its ``structuredContent`` and the progress the server reported; ``isError`` is a tool error the
model sees. A cancel interrupts the call (``StepInterrupted`` carrying the progress so far).
The call's trace context (``CallContext.headers``) travels in the request's ``_meta``, and so does
its idempotency key, under ``io.nrllm/idempotency-key`` (``IDEMPOTENCY_META``): the same on every
execution of one call, so a server may apply a repeated call's effect once.

Plain Python: no Django.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from ..domain.cancel import CallContext, StepInterrupted
from ..domain.errors import ToolError
from .client import McpCallInterrupted, hub
from .config import ServerConfig

DEFAULT_MAX_RESULT_CHARS = 100_000
# A _meta key of our own: reverse-DNS prefix, as the MCP spec asks of keys that are not the protocol's.
IDEMPOTENCY_META = "io.nrllm/idempotency-key"
_MAX_TEXT_ERROR = 2000


class McpTool:
    """One tool of one MCP server, offered to the model under ``name``."""

    def __init__(
        self,
        name: str,
        server: ServerConfig,
        remote: Any,
        *,
        timeout: float = 120.0,
        max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
    ) -> None:
        self.name = name
        self.server = server
        self.remote_name: str = remote.name
        self.description = str(remote.description or remote.title or remote.name)[:1024]
        schema = remote.input_schema if isinstance(remote.input_schema, dict) else {}
        self.parameters: dict[str, Any] = schema or {"type": "object", "properties": {}}
        hints = remote.annotations
        configured = server.approval_for(self.remote_name)
        destructive = bool(hints is not None and hints.destructive_hint is True)
        self.requires_approval = destructive if configured is None else configured
        self.idempotent = bool(hints is not None and (hints.read_only_hint is True or hints.idempotent_hint is True))
        self.timeout = server.timeout or timeout
        self.max_result_chars = max_result_chars
        self._validator = _validator(self.parameters)

    def execute(self, arguments: dict[str, Any], context: CallContext | None = None) -> Any:
        """Call the tool; raises ``ToolError`` for bad arguments, ``isError`` and a broken server."""
        context = context or CallContext()
        self.check(arguments)

        def shown(entry: dict[str, Any]) -> None:
            context.progress(entry["progress"], entry.get("total"), entry.get("message"))

        try:
            result, record = hub().call(
                self.server,
                self.remote_name,
                dict(arguments),
                token=context.token,
                timeout=self.timeout,
                on_progress=shown,
                meta=_meta(context),
            )
        except McpCallInterrupted as stop:
            where: dict[str, Any] = dict(self._where())
            if stop.record.cancelled_at is not None:
                where["cancelled_at"] = _iso(stop.record.cancelled_at)
            raise StepInterrupted(
                f"the call to MCP tool {self.remote_name!r} was cancelled",
                details={"mcp": where, "progress": stop.record.progress},
            ) from None
        return self._recorded(result, record.progress)

    def check(self, arguments: dict[str, Any]) -> None:
        """Raise ``ToolError`` naming the first way ``arguments`` break the ``inputSchema``."""
        if self._validator is None:
            return
        from jsonschema.exceptions import best_match

        error = best_match(self._validator.iter_errors(arguments))
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(the arguments)"
            raise ToolError(f"arguments do not match the tool's inputSchema at {where}: {error.message[:300]}")

    def _where(self) -> dict[str, str]:
        return {"server": self.server.name, "tool": self.remote_name}

    def _recorded(self, result: Any, progress: list[dict[str, Any]]) -> dict[str, Any]:
        texts: list[str] = []
        other: list[dict[str, Any]] = []
        for block in result.content or []:
            kind = getattr(block, "type", "")
            if kind == "text":
                texts.append(block.text)
            elif kind in ("image", "audio"):
                other.append({"type": kind, "mimeType": block.mime_type, "chars": len(block.data or "")})
            else:
                other.append(block.model_dump(mode="json", by_alias=True, exclude_none=True))
        text = "\n".join(texts)
        if result.is_error:
            raise ToolError(f"MCP tool {self.remote_name!r} reported an error: {text[:_MAX_TEXT_ERROR] or 'no detail'}")
        recorded: dict[str, Any] = {"mcp": self._where(), "text": text}
        if result.structured_content is not None:
            recorded["structuredContent"] = result.structured_content
        if other:
            recorded["content"] = other
        if progress:
            recorded["progress"] = progress
        size = len(json.dumps(recorded, default=str, ensure_ascii=False))
        if size > self.max_result_chars:
            raise ToolError(
                f"MCP tool {self.remote_name!r} returned {size} characters, more than the "
                f"{self.max_result_chars} a result may hold; ask for less"
            )
        return recorded


def _meta(context: CallContext) -> dict[str, str]:
    """The request's ``_meta``: the trace context, and the call's idempotency key when it has one."""
    meta = dict(context.headers)
    if context.idempotency_key is not None:
        meta[IDEMPOTENCY_META] = context.idempotency_key
    return meta


def _iso(unix: float) -> str:
    return dt.datetime.fromtimestamp(unix, dt.UTC).isoformat(timespec="milliseconds")


def _validator(schema: dict[str, Any]) -> Any:
    """A validator of ``schema``, or None when the server's schema is itself invalid (not checked)."""
    import jsonschema  # imported on first use: every process imports this module, few call MCP tools
    from jsonschema.exceptions import SchemaError

    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
        return cls(schema)
    except (SchemaError, TypeError, ValueError):
        return None
