"""The MCP sessions of this process, owned by one event-loop thread; run threads call into it.

The ``mcp`` SDK is asynchronous; our runs execute on plain threads. One daemon thread per process
runs an asyncio loop that owns every session (one per configured server, shared by the runs of the
process). A run thread submits a call (``Hub.call``) and blocks on its future; the run's cancel
token cancels that future, which cancels the task awaiting ``call_tool``, and the SDK then writes
``notifications/cancelled`` at once. The run thread is released at the same moment; a late answer
is dropped by the SDK and never reaches the run.

A stdio server is started on first use through ``guard.py`` (its own process group, killed with
us even if we are SIGKILLed) and again after it died. A forked child (an RQ work horse) builds its
own hub on first use. The hub closes its sessions at exit. Plain Python: no Django.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import os
import threading
from collections.abc import Mapping
from typing import Any

from ..domain.cancel import CancelToken
from ..domain.errors import ToolError
from .config import ServerConfig
from .session import CallRecord, McpCallInterrupted, McpUnavailable, ProgressSink, ServerSession

logger = logging.getLogger(__name__)

__all__ = ["CallRecord", "Hub", "McpCallInterrupted", "McpUnavailable", "hub"]

_SETTLE_SECONDS = 1.0  # the SDK bounds its own cancel write; this only keeps a wedged loop from holding a run


class Hub:
    """This process's MCP sessions and the loop thread that owns them; thread-safe."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._servers: dict[str, ServerSession] = {}

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                started = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(started.set)
                    loop.run_forever()

                # Lives as long as the process: the servers it starts die with this thread (guard.py).
                threading.Thread(target=run, name="nrllm-mcp", daemon=True).start()
                started.wait()
                self._loop = loop
            return self._loop

    def _server(self, config: ServerConfig) -> ServerSession:
        with self._lock:
            server = self._servers.get(config.name)
            if server is not None and server.config != config:  # reconfigured: stop the old one
                if self._loop is not None:
                    asyncio.run_coroutine_threadsafe(server.stop(), self._loop)
                server = None
            if server is None:
                server = self._servers[config.name] = ServerSession(config)
            return server

    def tools(self, config: ServerConfig) -> list[Any]:
        """The server's tools (``mcp.types.Tool``), starting it if needed; raises ``McpUnavailable``."""
        found = self.list_all([config], force=True)[config.name]
        if isinstance(found, McpUnavailable):
            raise found
        return found

    def list_all(self, configs: list[ServerConfig], *, force: bool = False) -> dict[str, list[Any] | McpUnavailable]:
        """Every server's tools, or why it could not be listed; the servers start side by side.

        A server remembered as broken answers its last failure at once, unless ``force``.
        """
        servers = [self._server(c) for c in configs]
        loop = self._ensure_loop()
        futures = [asyncio.run_coroutine_threadsafe(s.ensure(force=force), loop) for s in servers]
        found: dict[str, list[Any] | McpUnavailable] = {}
        for server, future in zip(servers, futures):
            try:
                future.result(server.config.connect_timeout + 15.0)
                found[server.config.name] = list(server.tools)
            except concurrent.futures.TimeoutError:
                future.cancel()
                found[server.config.name] = McpUnavailable(f"MCP server {server.config.name!r} did not start in time")
            except ToolError as exc:
                found[server.config.name] = exc if isinstance(exc, McpUnavailable) else McpUnavailable(str(exc))
        return found

    def call(
        self,
        config: ServerConfig,
        tool: str,
        arguments: dict[str, Any],
        *,
        token: CancelToken,
        timeout: float,
        on_progress: ProgressSink | None = None,
        meta: Mapping[str, str] | None = None,
    ) -> tuple[Any, CallRecord]:
        """Call ``tool`` and wait for its ``CallToolResult``; the token cancels it.

        Returns ``(result, record)``. Raises ``ToolError`` (with a message fit for the model)
        when the server cannot be reached, breaks, times out or refuses, and
        ``McpCallInterrupted`` when the token trips first: the request then gets its
        ``notifications/cancelled`` and its late answer is dropped. ``meta`` goes in the request's
        ``_meta`` (the run's trace context and the call's idempotency key, as the MCP spec allows).
        """
        server = self._server(config)
        record = CallRecord()
        if token.cancelled:  # nothing starts once the token has tripped
            raise McpCallInterrupted(record)
        future = asyncio.run_coroutine_threadsafe(
            server.call(tool, arguments, timeout, record, on_progress, token, meta), self._ensure_loop()
        )

        def abandon() -> None:  # on the tripping thread: the loop cancels the task, the SDK tells the server
            future.cancel()

        unregister = token.on_cancel(abandon)
        try:
            return future.result(timeout + config.connect_timeout + 15.0), record
        except concurrent.futures.CancelledError:
            if token.cancelled:
                # The SDK's cancel is a write or two away: wait for it, so the step can say when.
                record.settled.wait(_SETTLE_SECONDS)
                raise McpCallInterrupted(record) from None
            raise ToolError(record.broken or f"the call to MCP server {config.name!r} was abandoned") from None
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise ToolError(f"MCP server {config.name!r} did not answer in time") from None
        finally:
            unregister()

    def started(self, name: str) -> int:
        """How many times this process started server ``name`` (restarts included)."""
        server = self._servers.get(name)
        return server.started if server is not None else 0

    def close(self, timeout: float = 15.0) -> None:
        """Stop every server this process started, then the loop; the hub can be used again after."""
        with self._lock:
            loop, self._loop = self._loop, None
            servers, self._servers = list(self._servers.values()), {}
        if loop is None or self.pid != os.getpid():
            return

        async def stop_all() -> None:
            await asyncio.gather(*(s.stop() for s in servers), return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(stop_all(), loop).result(timeout)
        except Exception:
            logger.warning("MCP servers did not all stop within %.0f s", timeout)
        loop.call_soon_threadsafe(loop.stop)


_hub: Hub | None = None
_hub_lock = threading.Lock()


def hub() -> Hub:
    """This process's hub (a forked child gets a new one, never its parent's)."""
    global _hub
    with _hub_lock:
        if _hub is None or _hub.pid != os.getpid():
            _hub = Hub()
        return _hub


def _forget_after_fork() -> None:
    global _hub, _hub_lock
    _hub, _hub_lock = None, threading.Lock()


def _close_at_exit() -> None:
    if _hub is not None and _hub.pid == os.getpid():
        _hub.close()


os.register_at_fork(after_in_child=_forget_after_fork)
atexit.register(_close_at_exit)
