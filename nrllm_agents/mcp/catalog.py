"""The MCP tools a run can be offered, from the settings: the Django side of ``nrllm_agents.mcp``.

Servers come from the file named by ``NRLLM_MCP_CONFIG`` (``MCP_CONFIG``) and from
``NRLLM_AGENTS["MCP_SERVERS"]`` (same shape; a server named in both takes the settings' entry).
A server's tools are listed by starting it in this process (``client.hub``) the first time
they are asked for; a server that cannot be started is remembered as broken for
``RETRY_SECONDS``, so a page or a request that asks again does not wait on it each time.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..conf import app_settings
from ..domain.errors import ConfigurationError
from . import config
from .client import McpUnavailable, hub
from .names import tool_name, unique
from .tool import McpTool

RETRY_SECONDS = 10.0


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


_failures: dict[str, tuple[float, str]] = {}
_listed: set[str] = set()
_lock = threading.Lock()


def catalog(*, retry: bool = False) -> Catalog:
    """List every configured server's tools (starting servers not yet started in this process).

    ``retry`` asks again a server that failed less than ``RETRY_SECONDS`` ago.
    """
    out = Catalog()
    try:
        out.configured = servers()
    except ConfigurationError as exc:
        out.broken["(configuration)"] = str(exc)
        return out
    names: dict[tuple[str, str], str] = {}
    remote: dict[tuple[str, str], tuple[config.ServerConfig, Any]] = {}
    asked = []
    for name, server in out.configured.items():
        with _lock:
            failed = _failures.get(name)
        if failed is not None and not retry and time.monotonic() - failed[0] < RETRY_SECONDS:
            out.broken[name] = failed[1]
        else:
            asked.append(server)
    valid = []
    for server in asked:
        try:
            server.resolved()  # a variable that is not set is named before anything starts
            valid.append(server)
        except ConfigurationError as exc:
            out.broken[server.name] = str(exc)
    for name, listed in hub().list_all(valid).items() if valid else ():
        with _lock:
            if isinstance(listed, McpUnavailable):
                _failures[name] = (time.monotonic(), str(listed))
                out.broken[name] = str(listed)
                continue
            _failures.pop(name, None)
        for tool in listed:
            names[(name, tool.name)] = tool_name(name, tool.name)
            remote[(name, tool.name)] = (out.configured[name], tool)
    for key, offered in unique(names).items():
        server, tool = remote[key]
        out.tools[offered] = McpTool(
            offered,
            server,
            tool,
            timeout=float(app_settings.MCP_CALL_TIMEOUT),
            max_result_chars=int(app_settings.MCP_MAX_RESULT_CHARS),
        )
    with _lock:
        _listed.clear()
        _listed.update(out.tools)
    return out


def listed() -> set[str]:
    """The MCP tool names this process listed last (no I/O: for metrics labels and the like)."""
    with _lock:
        return set(_listed)


def configured() -> bool:
    """Whether any MCP server is configured (reads the settings only, starts nothing)."""
    return bool(str(app_settings.MCP_CONFIG or "").strip() or app_settings.MCP_SERVERS)


def tool(name: str) -> McpTool | None:
    """The MCP tool offered as ``name``, or None (no server configured offers it)."""
    if not configured():
        return None
    listing = catalog()
    found = listing.tools.get(name)
    if found is None:
        for server, why in listing.broken.items():
            if name.startswith(f"{server}__"):
                raise ConfigurationError(f"tool {name!r} cannot be offered: {why}")
    return found


def health(*, retry: bool = True) -> list[dict[str, Any]]:
    """One row per configured server: name, transport, where, ok, tools, error (for checks, pages)."""
    if not configured():
        return []
    listing = catalog(retry=retry)
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
    if "(configuration)" in listing.broken:
        rows.append(
            {
                "server": "(configuration)",
                "transport": "",
                "where": "",
                "ok": False,
                "tools": 0,
                "error": listing.broken["(configuration)"],
            }
        )
    return rows


def forget() -> None:
    """Forget the servers remembered as broken (tests, after a configuration change)."""
    with _lock:
        _failures.clear()
        _listed.clear()
