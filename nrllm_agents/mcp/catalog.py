"""The MCP tools a run can be offered, from the settings: the Django side of ``nrllm_agents.mcp``.

Servers come from the file named by ``NRLLM_MCP_CONFIG`` (``MCP_CONFIG``) and from
``NRLLM_AGENTS["MCP_SERVERS"]`` (same shape; a server named in both takes the settings' entry).

The process keeps a catalog: the last listing of each server, and the servers that could not
be listed, with why (a server that listed once and then broke keeps its tools, marked broken;
a call to one fails at once while the server is remembered as broken, ``session.py``).

- An HTTP request never waits on a server (``without_waiting``, entered by the edge
  middleware): it reads the catalog as it is, and a small daemon thread of this process lists
  the servers again in the background, all side by side with a timeout each, at most once every
  ``MIN_INTERVAL_SECONDS`` and at least every ``REFRESH_SECONDS`` while someone reads.
- Anywhere else (a command, a worker's run) a reader that finds a server not listed yet lists
  the servers itself, in its own thread, before it answers.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..conf import app_settings
from ..domain.errors import ConfigurationError
from . import config
from .client import McpUnavailable, hub
from .names import tool_name, unique
from .tool import McpTool

logger = logging.getLogger(__name__)

REFRESH_SECONDS = 30.0
MIN_INTERVAL_SECONDS = 2.0
NOT_LISTED_YET = "not listed yet: this process is listing it in the background; ask again in a moment"
CONFIGURATION = "(configuration)"


def servers() -> dict[str, config.ServerConfig]:
    """Every configured server by name; raises ``ConfigurationError`` for a malformed entry."""
    found: dict[str, config.ServerConfig] = {}
    path = str(app_settings.MCP_CONFIG or "").strip()
    if path:
        found.update(config.load_file(path))
    found.update(config.parse(app_settings.MCP_SERVERS or {}, origin='NRLLM_AGENTS["MCP_SERVERS"]'))
    return found


@dataclass
class Catalog:
    """The MCP tools by offered name, and the servers that could not be listed (name → why)."""

    tools: dict[str, McpTool] = field(default_factory=dict)
    broken: dict[str, str] = field(default_factory=dict)
    configured: dict[str, config.ServerConfig] = field(default_factory=dict)

    def servers_by_tool(self) -> dict[str, str]:
        """Each offered tool name with the name of the server it comes from."""
        return {name: mcp_tool.server.name for name, mcp_tool in self.tools.items()}


@dataclass(frozen=True)
class _Listing:
    """One server's last listing: its remote tools (from its last success) and its last error."""

    server: config.ServerConfig
    tools: tuple[Any, ...] | None  # ``mcp.types.Tool``; None: never listed
    error: str  # empty: the last listing succeeded


_listings: dict[str, _Listing] = {}
_snapshot: Catalog | None = None
_lock = threading.Lock()
_no_wait: contextvars.ContextVar[bool] = contextvars.ContextVar("nrllm_mcp_no_wait", default=False)


@contextlib.contextmanager
def without_waiting() -> Iterator[None]:
    """Within this block (an HTTP request), readers never wait on a server: see the module docstring."""
    token = _no_wait.set(True)
    try:
        yield
    finally:
        _no_wait.reset(token)


def configured() -> bool:
    """Whether any MCP server is configured (reads the settings only, starts nothing)."""
    return bool(str(app_settings.MCP_CONFIG or "").strip() or app_settings.MCP_SERVERS)


def refresh(*, force: bool = False) -> Catalog:
    """List every configured server now, in this thread, side by side; the catalog it makes.

    ``force`` starts again the servers remembered as broken (commands: ``agent_tools``, ``check``).
    """
    try:
        found = servers()
    except ConfigurationError as exc:
        with _lock:
            _listings.clear()
        return _publish(Catalog(broken={CONFIGURATION: str(exc)}))
    valid, invalid = [], {}
    for server in found.values():
        try:
            server.resolved()  # a variable that is not set is named before anything starts
            valid.append(server)
        except ConfigurationError as exc:
            invalid[server.name] = str(exc)
    answers = hub().list_all(valid, force=force) if valid else {}
    with _lock:
        for name in set(_listings) - set(found):
            del _listings[name]
        for server in found.values():
            before = _listings.get(server.name)
            kept = before.tools if before is not None and before.server == server else None
            answer = answers.get(server.name)
            if server.name in invalid:
                _listings[server.name] = _Listing(server, kept, invalid[server.name])
            elif isinstance(answer, McpUnavailable) or answer is None:
                _listings[server.name] = _Listing(server, kept, str(answer or "not listed"))
            else:
                _listings[server.name] = _Listing(server, tuple(answer), "")
    return _publish(_build(found))


def _build(found: dict[str, config.ServerConfig]) -> Catalog:
    """The catalog of the servers ``found``, from their listings (no I/O)."""
    out = Catalog(configured=found)
    names: dict[tuple[str, str], str] = {}
    remote: dict[tuple[str, str], tuple[config.ServerConfig, Any]] = {}
    with _lock:
        listings = dict(_listings)
    for name, server in found.items():
        listing = listings.get(name)
        if listing is None or listing.server != server:
            out.broken[name] = NOT_LISTED_YET
            continue
        if listing.error:
            out.broken[name] = listing.error
        for tool in listing.tools or ():
            names[(name, tool.name)] = tool_name(name, tool.name)
            remote[(name, tool.name)] = (server, tool)
    for key, offered in unique(names).items():
        server, tool = remote[key]
        out.tools[offered] = McpTool(
            offered,
            server,
            tool,
            timeout=float(app_settings.MCP_CALL_TIMEOUT),
            max_result_chars=int(app_settings.MCP_MAX_RESULT_CHARS),
        )
    return out


def _publish(catalog: Catalog) -> Catalog:
    global _snapshot
    with _lock:
        _snapshot = catalog
    _refresher().listed()
    return catalog


def current(*, wait: bool | None = None) -> Catalog:
    """The process's catalog. ``wait`` (default: not inside ``without_waiting``): a server not
    listed yet is listed first, in this thread; otherwise the background thread is asked to."""
    if not configured():
        return Catalog()
    if wait is None:
        wait = not _no_wait.get()
    try:
        found = servers()
    except ConfigurationError as exc:
        return Catalog(broken={CONFIGURATION: str(exc)})
    with _lock:
        snapshot = _snapshot
    if snapshot is None or snapshot.configured != found:  # the settings changed since: rebuilt, not listed
        snapshot = _build(found)
    pending = any(why == NOT_LISTED_YET for why in snapshot.broken.values())
    if pending and wait:
        return refresh()
    _refresher().wanted(pending)
    return snapshot


def listed() -> set[str]:
    """The MCP tool names this process listed last (no I/O: for metrics labels and the like)."""
    return set(listed_servers())


def listed_servers() -> dict[str, str]:
    """The MCP tool names this process listed last, each with its server's name (no I/O)."""
    with _lock:
        snapshot = _snapshot
    return snapshot.servers_by_tool() if snapshot is not None else {}


def tool(name: str) -> McpTool | None:
    """The MCP tool offered as ``name`` (its server may be broken: a call then fails at once), or None."""
    if not configured():
        return None
    return current().tools.get(name)


def health(*, retry: bool = True) -> list[dict[str, Any]]:
    """One row per configured server: name, transport, where, ok, tools, error (for checks, pages).

    ``retry`` lists the servers now (broken ones too); without it, the catalog as it is.
    """
    if not configured():
        return []
    listing = refresh(force=True) if retry else current()
    rows = []
    for name, server in sorted(listing.configured.items()):
        count = sum(1 for t in listing.tools.values() if t.server.name == name)
        rows.append(
            {
                "server": name,
                "transport": server.transport,
                "where": server.where(),
                "ok": name not in listing.broken,
                "tools": count,
                "error": listing.broken.get(name, ""),
            }
        )
    if CONFIGURATION in listing.broken:
        rows.append(
            {
                "server": CONFIGURATION,
                "transport": "",
                "where": "",
                "ok": False,
                "tools": 0,
                "error": listing.broken[CONFIGURATION],
            }
        )
    return rows


def forget() -> None:
    """Forget every listing (tests, after a configuration change)."""
    global _snapshot
    with _lock:
        _listings.clear()
        _snapshot = None


class _Refresher:
    """The background lister of one process: started on the first read that does not wait."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._last = 0.0  # monotonic time of the last listing, by anyone
        self._lock = threading.Lock()

    def listed(self) -> None:
        self._last = time.monotonic()

    def wanted(self, pending: bool) -> None:
        """A reader read the catalog: list again if a server is pending or the listing is old."""
        if not pending and time.monotonic() - self._last < REFRESH_SECONDS:
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="nrllm-mcp-catalog", daemon=True)
                self._thread.start()
        self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()  # only when a reader asks: an idle process lists nothing
            self._wake.clear()
            try:
                refresh()
            except Exception:  # the lister must outlive a bad pass; the next one tries again
                logger.exception("listing the MCP servers failed")
            time.sleep(MIN_INTERVAL_SECONDS)  # the bound on the rate, whatever the readers ask


_refreshers: dict[int, _Refresher] = {}
_refreshers_lock = threading.Lock()


def _refresher() -> _Refresher:
    """This process's refresher (a forked child gets its own: threads do not survive a fork)."""
    pid = os.getpid()
    with _refreshers_lock:
        found = _refreshers.get(pid)
        if found is None:
            found = _refreshers[pid] = _Refresher()
        return found
