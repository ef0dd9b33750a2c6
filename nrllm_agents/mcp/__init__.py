"""Tools from MCP servers: configuration, the per-process sessions, the tool adapter.

Django-free: ``config`` (the ``mcpServers`` shape), ``names`` (provider-safe tool names),
``session`` (one server's SDK session and its calls, on the loop), ``client`` (the per-process
event-loop thread that owns the sessions; the cancel path), ``tool`` (the adapter the tool loop
calls) and ``guard.py`` (run as a script: no server outlives us).
The Django side is ``catalog`` (servers from the settings, discovery, health).
"""

from .client import Hub, McpUnavailable, hub
from .config import ServerConfig, parse
from .names import tool_name
from .tool import McpTool

__all__ = ["Hub", "McpTool", "McpUnavailable", "ServerConfig", "hub", "parse", "tool_name"]
