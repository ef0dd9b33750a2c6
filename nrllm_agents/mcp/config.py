"""MCP servers as configured: the ``mcpServers`` JSON shape of Claude Desktop, Cursor and VS Code.

A server is either stdio (``command``, ``args``, ``env``, ``cwd``) or Streamable HTTP (``url``,
``headers``). ``${NAME}`` in an argument, an ``env`` value, the URL or a header value is taken
from this process's environment when the server is started, so secrets live in the environment
only: the parsed configuration keeps the template, and ``redact`` masks every expanded value in
whatever text leaves this package (errors, listings). Besides the common keys, a server may set:

- ``timeout``: the deadline of one tool call, in seconds (default: ``MCP_CALL_TIMEOUT``);
- ``connectTimeout``: how long starting the server and listing its tools may take;
- ``approval``: ``true`` / ``false`` for every tool of the server, or ``{tool name: bool}``;
  a tool named nowhere follows its annotations (``destructiveHint`` → approval required);
- ``disabled``: ``true`` leaves the server out.

Plain Python: no Django.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..domain.errors import ConfigurationError

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SERVER_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,40}$")
STDIO, HTTP = "stdio", "http"
_HTTP_TYPES = {"http", "streamable-http", "streamableHttp", "streamable_http"}


@dataclass(frozen=True)
class ServerConfig:
    """One configured server; the templates are kept, never the secrets they expand to."""

    name: str
    transport: str  # STDIO or HTTP
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout: float | None = None
    connect_timeout: float = 20.0
    approval: bool | Mapping[str, bool] | None = None

    def approval_for(self, tool: str) -> bool | None:
        """The configured approval of one tool: True / False, or None (follow its annotations)."""
        if isinstance(self.approval, Mapping):
            return self.approval.get(tool)
        return self.approval

    def where(self) -> str:
        """What to show of the server: the command or the URL, with no expanded secret."""
        if self.transport == STDIO:
            return " ".join([self.command, *self.args])[:200]
        return self.url[:200]

    def resolved(self) -> Resolved:
        """The values to start the server with, ``${NAME}`` taken from the environment.

        Raises ``ConfigurationError`` naming a variable that is not set (never a value).
        """
        secrets: list[str] = []

        def expand(text: str) -> str:
            def one(match: re.Match[str]) -> str:
                value = os.environ.get(match.group(1))
                if value is None:
                    raise ConfigurationError(
                        f"MCP server {self.name!r}: environment variable {match.group(1)} is not set"
                    )
                if value:
                    secrets.append(value)
                return value

            return _VARIABLE.sub(one, text)

        return Resolved(
            args=tuple(expand(a) for a in self.args),
            env={k: expand(v) for k, v in self.env.items()},
            url=expand(self.url),
            headers={k: expand(v) for k, v in self.headers.items()},
            secrets=tuple(sorted(set(secrets), key=len, reverse=True)),
        )


@dataclass(frozen=True)
class Resolved:
    """A server's values with the environment expanded; never stored, never logged."""

    args: tuple[str, ...]
    env: dict[str, str]
    url: str
    headers: dict[str, str]
    secrets: tuple[str, ...]

    def redact(self, text: str) -> str:
        """``text`` with every expanded value (and header value) replaced by ``***``."""
        for secret in (*self.secrets, *self.headers.values()):
            if len(secret) >= 4:
                text = text.replace(secret, "***")
        return text


def parse(document: Any, *, origin: str) -> dict[str, ServerConfig]:
    """The servers of one ``{"mcpServers": {...}}`` document (or of its inner mapping).

    Raises ``ConfigurationError`` naming ``origin`` and the server for every malformed entry.
    """
    if isinstance(document, Mapping) and "mcpServers" in document:
        document = document["mcpServers"]
    if document is None:
        return {}
    if not isinstance(document, Mapping):
        raise ConfigurationError(f"{origin}: mcpServers must be an object of server name -> settings")
    servers: dict[str, ServerConfig] = {}
    for name, entry in document.items():
        where = f"{origin}: MCP server {name!r}"
        if not isinstance(name, str) or not _SERVER_NAME.match(name):
            raise ConfigurationError(f"{where}: a name is 1-40 letters, digits, '.', '_' or '-'")
        if not isinstance(entry, Mapping):
            raise ConfigurationError(f"{where}: settings must be an object")
        if entry.get("disabled") is True:
            continue
        servers[name] = _server(name, entry, where)
    return servers


def _server(name: str, entry: Mapping[str, Any], where: str) -> ServerConfig:
    kind = entry.get("type") or entry.get("transport")
    has_url, has_command = "url" in entry, "command" in entry
    if has_url == has_command:
        raise ConfigurationError(f"{where}: give either command (stdio) or url (Streamable HTTP)")
    if kind not in (None, STDIO, *_HTTP_TYPES):
        raise ConfigurationError(f"{where}: type {kind!r} is not supported (stdio or http)")
    timeout = _seconds(entry.get("timeout"), where, "timeout")
    connect_timeout = _seconds(entry.get("connectTimeout", 20.0), where, "connectTimeout") or 20.0
    approval = _approval(entry.get("approval"), where)
    if has_command:
        command = entry["command"]
        if not isinstance(command, str) or not command.strip():
            raise ConfigurationError(f"{where}: command must be a non-empty string")
        cwd = entry.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise ConfigurationError(f"{where}: cwd must be a string")
        return ServerConfig(
            name,
            STDIO,
            command=command,
            args=tuple(_strings(entry.get("args", []), where, "args")),
            env=_mapping(entry.get("env", {}), where, "env"),
            cwd=cwd,
            timeout=timeout,
            connect_timeout=connect_timeout,
            approval=approval,
        )
    url = entry["url"]
    if not isinstance(url, str) or not re.match(r"^https?://", url):
        raise ConfigurationError(f"{where}: url must be an http:// or https:// URL")
    return ServerConfig(
        name,
        HTTP,
        url=url,
        headers=_mapping(entry.get("headers", {}), where, "headers"),
        timeout=timeout,
        connect_timeout=connect_timeout,
        approval=approval,
    )


def _strings(value: Any, where: str, key: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigurationError(f"{where}: {key} must be a list of strings")
    return value


def _mapping(value: Any, where: str, key: str) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ConfigurationError(f"{where}: {key} must be an object of strings")
    return dict(value)


def _seconds(value: Any, where: str, key: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 7 * 24 * 3600:
        raise ConfigurationError(f"{where}: {key} must be a positive number of seconds")
    return float(value)


def _approval(value: Any, where: str) -> bool | dict[str, bool] | None:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, Mapping) and all(isinstance(k, str) and isinstance(v, bool) for k, v in value.items()):
        return dict(value)
    raise ConfigurationError(f"{where}: approval must be true, false or an object of tool name -> true/false")


def load_file(path: str) -> dict[str, ServerConfig]:
    """The servers of the JSON file at ``path``; ``ConfigurationError`` when unreadable or malformed."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"NRLLM_MCP_CONFIG={path}: cannot be read ({exc.strerror})") from None
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ConfigurationError(f"NRLLM_MCP_CONFIG={path}: not valid JSON ({exc})") from None
    return parse(document, origin=f"NRLLM_MCP_CONFIG={path}")
