"""One MCP server's session, on the hub's event loop: started on demand, restarted after it died.

``ServerSession`` holds the transport (stdio through ``guard.py``, or Streamable HTTP) and the
SDK's ``ClientSession`` open in one task of its own (anyio's rule: a task group is left by the
task that entered it), and makes the calls: each is a task of the loop, so cancelling it makes
the SDK write ``notifications/cancelled`` for its request. A server that could not be started
is remembered with a backoff: until it is due again, and while another caller retries it, asking
for it fails at once (a run's call gets its tool error without waiting). A stdio server's stderr
goes to this module's log, a line at a time, tagged with the server's name (``stderr.py``).
Everything here runs on the loop thread; ``client.Hub`` is the thread-safe front.

Plain Python: no Django.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..domain.cancel import CancelToken
from ..domain.errors import ToolError
from .config import HTTP, Resolved, ServerConfig
from .stderr import StderrLog

logger = logging.getLogger(__name__)

GUARD = str(Path(__file__).with_name("guard.py"))
_CONNECTION_CLOSED, _REQUEST_TIMEOUT = -32000, -32001
_MAX_MESSAGE = 500
RETRY_FIRST_SECONDS = 10.0  # a server that failed to start is asked again after this, then twice as late
RETRY_MAX_SECONDS = 300.0


class McpUnavailable(ToolError):
    """An MCP server could not be started or reached, or did not answer its handshake."""


class McpCallInterrupted(BaseException):
    """The call was cancelled by the run's token; ``record`` holds the progress seen so far."""

    def __init__(self, record: CallRecord) -> None:
        super().__init__("the MCP call was cancelled")
        self.record = record


@dataclass
class CallRecord:
    """What one call saw besides its result: progress notifications, why it broke, when it was cancelled.

    ``cancelled_at`` (a Unix time) is when the SDK had finished cancelling the request: by then it
    has written ``notifications/cancelled`` for it, if the request had gone out.
    """

    progress: list[dict[str, Any]] = field(default_factory=list)
    broken: str | None = None
    cancelled_at: float | None = None
    settled: threading.Event = field(default_factory=threading.Event)


ProgressSink = Callable[[dict[str, Any]], None]


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 1] + "…"


class ServerSession:
    """One server's session, on the hub's loop: started on demand, restarted after it died."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.session: Any = None
        self.tools: list[Any] = []
        self.resolved: Resolved | None = None
        self.started = 0
        self._stop: asyncio.Event | None = None
        self._owner: asyncio.Task[None] | None = None
        self._lock: asyncio.Lock | None = None
        self._calls: dict[asyncio.Task[Any], CallRecord] = {}
        self.failure: str | None = None  # why the last start failed (None: it did not, or no start yet)
        self._retry_at = 0.0
        self._backoff = 0.0
        self._stderr: StderrLog | None = None

    def redact(self, text: str) -> str:
        return _clip(self.resolved.redact(text) if self.resolved is not None else text)

    def _alive(self) -> bool:
        if self.session is None or self._owner is None or self._owner.done():
            return False
        dispatcher = getattr(self.session, "_dispatcher", None)  # fail-soft: no such attribute → trust it
        return not getattr(dispatcher, "_closed", False)

    async def ensure(self, *, force: bool = False) -> Any:
        """The live session, starting (or restarting) the server first; raises ``McpUnavailable``.

        A server whose last start failed is not started again before its backoff is over, nor
        while another caller is starting it: that raises at once, with the last failure.
        ``force`` (a command listing the servers) waits and starts it now.
        """
        if self._lock is None:
            self._lock = asyncio.Lock()
        if self._alive():
            return self.session
        if not force and self.failure is not None and (time.monotonic() < self._retry_at or self._lock.locked()):
            raise McpUnavailable(self.failure)
        async with self._lock:
            if self._alive():
                return self.session
            try:
                session = await self._start()
            except McpUnavailable as exc:
                self._backoff = min(RETRY_MAX_SECONDS, max(RETRY_FIRST_SECONDS, self._backoff * 2))
                self.failure, self._retry_at = str(exc), time.monotonic() + self._backoff
                raise
            self.failure, self._backoff = None, 0.0
            return session

    async def _start(self) -> Any:
        await self.stop()
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Abandoned after a timeout, its exception is still taken: never "Future exception was never retrieved".
        ready.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._stop = asyncio.Event()
        self._owner = asyncio.create_task(self._own(ready, self._stop), name=f"mcp-{self.config.name}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.config.connect_timeout)
        except TimeoutError:
            await self.stop()
            raise McpUnavailable(
                f"MCP server {self.config.name!r} did not complete its handshake within "
                f"{self.config.connect_timeout:g} s{await self._said()}"
            ) from None
        except Exception as exc:
            await self.stop()
            if isinstance(exc, McpUnavailable):
                raise
            if isinstance(exc, ToolError):
                raise McpUnavailable(str(exc)) from None
            leaf = _leaf(exc)
            if getattr(leaf, "code", None) == _CONNECTION_CLOSED:
                said = await self._said()
                raise McpUnavailable(
                    f"MCP server {self.config.name!r} exited or closed the connection before completing "
                    f"its handshake{said or ' (its stderr, in the log, says why)'}"
                ) from None
            raise McpUnavailable(
                f"MCP server {self.config.name!r} could not be started or reached: "
                f"{self.redact(f'{type(leaf).__name__}: {leaf}')}"
            ) from None
        self.started += 1
        return self.session

    async def _said(self) -> str:
        """The last line the server wrote to its stderr, as ``": …"`` (empty when it wrote none)."""
        if self._stderr is None:
            return ""
        for _ in range(10):  # the reader may be a moment behind the server's exit
            if self._stderr.closed.is_set():
                break
            await asyncio.sleep(0.02)
        last = self._stderr.last()
        return f": {self.redact(last)}" if last else ""

    async def _own(self, ready: asyncio.Future[None], stop: asyncio.Event) -> None:
        """Hold the transport and the session open until ``stop``; one task enters and leaves them."""
        from mcp import types
        from mcp.client.session import ClientSession

        try:
            self.resolved = self.config.resolved()
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport(stack, self.resolved))
                session = await stack.enter_async_context(
                    ClientSession(
                        read,
                        write,
                        message_handler=self._on_message,
                        client_info=types.Implementation(name="nrllm_agents", version="1"),
                    )
                )
                await session.initialize()
                tools: list[Any] = []
                cursor = None
                while True:
                    listing = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor))
                    tools.extend(listing.tools)
                    cursor = listing.next_cursor
                    if not cursor or len(tools) > 10_000:
                        break
                self.session, self.tools = session, tools
                ready.set_result(None)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
            elif not isinstance(exc, asyncio.CancelledError):
                logger.warning("MCP server %r: session ended: %s", self.config.name, self.redact(str(_leaf(exc))))
            if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt, SystemExit)):
                raise
        finally:
            self.session = None

    def _transport(self, stack: contextlib.AsyncExitStack, resolved: Resolved) -> Any:
        if self.config.transport == HTTP:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            client = create_mcp_http_client(headers=resolved.headers)
            stack.push_async_callback(client.aclose)
            return streamable_http_client(resolved.url, http_client=client)
        from mcp.client.stdio import StdioServerParameters, stdio_client

        parameters = StdioServerParameters(
            command=sys.executable,
            args=[GUARD, str(os.getpid()), "--", self.config.command, *resolved.args],
            env=resolved.env or None,
            cwd=self.config.cwd,
        )
        # The server's stderr is a pipe read by a thread that logs it: never this process's stderr.
        self._stderr = StderrLog(self.config.name, self.redact)
        stack.callback(self._stderr.close_writer)  # after the transport: the server is gone by then
        return stdio_client(parameters, errlog=self._stderr.writer)

    async def _on_message(self, message: Any) -> None:
        """A message the server sent that is not an answer; a broken one fails the calls in flight."""
        if isinstance(message, Exception):
            reason = (
                f"MCP server {self.config.name!r} sent a message that is not valid JSON-RPC "
                f"({self.redact(f'{type(message).__name__}: {message}')})"
            )
            for task, record in list(self._calls.items()):
                record.broken = reason
                task.cancel()

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        timeout: float,
        record: CallRecord,
        sink: ProgressSink | None,
        token: CancelToken,
        meta: Mapping[str, str] | None = None,
    ) -> Any:
        from mcp.shared.exceptions import MCPError
        from pydantic import ValidationError

        session = await self.ensure()
        if token.cancelled:  # tripped while the server started: the request is never written
            raise asyncio.CancelledError()
        task = asyncio.current_task()
        assert task is not None

        async def progress(value: float, total: float | None, message: str | None) -> None:
            entry = {"progress": value, "total": total, "message": message}
            record.progress.append(entry)
            if sink is not None:
                try:
                    sink(entry)
                except Exception:  # showing progress never breaks the call
                    logger.exception("an MCP progress sink failed")

        self._calls[task] = record
        try:
            return await session.call_tool(
                tool,
                arguments,
                read_timeout_seconds=timeout,
                progress_callback=progress,
                meta=dict(meta) if meta else None,  # an open map: the trace context's keys
            )
        except asyncio.CancelledError:
            record.cancelled_at = time.time()
            raise
        except MCPError as exc:
            if exc.code == _CONNECTION_CLOSED:
                await self.stop()
                if self.config.transport == HTTP:
                    raise ToolError(
                        f"MCP server {self.config.name!r} dropped the call (the connection closed, or its answer "
                        "was too large to read); the session is opened again on the next call"
                    ) from None
                raise ToolError(
                    f"MCP server {self.config.name!r} closed the connection during the call (it stopped or "
                    "crashed); it is started again on the next call"
                ) from None
            if exc.code == _REQUEST_TIMEOUT:
                raise ToolError(
                    f"MCP tool {tool!r} of server {self.config.name!r} did not answer within {timeout:g} s; "
                    "the server was told to stop it"
                ) from None
            raise ToolError(
                f"MCP server {self.config.name!r} refused the call: {self.redact(exc.error.message)}"
            ) from None
        except ValidationError as exc:
            raise ToolError(
                f"MCP server {self.config.name!r} answered with a result that is not valid MCP "
                f"({exc.error_count()} errors)"
            ) from None
        finally:
            self._calls.pop(task, None)
            record.settled.set()

    async def stop(self) -> None:
        """Close the session and stop the server (for stdio: stdin, SIGTERM, SIGKILL); idempotent.

        A server still in its handshake is cancelled at once (nothing to close gracefully).
        """
        owner, self._owner = self._owner, None
        if self._stop is not None:
            self._stop.set()
        if owner is not None and not owner.done():
            if self.session is None:
                owner.cancel()
            try:
                await asyncio.wait_for(asyncio.shield(owner), 10.0)
            except (TimeoutError, asyncio.CancelledError):
                owner.cancel()
            except Exception:
                pass
        self.session = None
