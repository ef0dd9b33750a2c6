"""Builds providers and tools by name from settings."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from django.utils.module_loading import import_string

from ..conf import DEFAULTS, app_settings
from ..domain import ConfigurationError
from ..domain.providers import Provider, ScriptedProvider
from ..domain.providers.wire import PLACEHOLDER_API_KEY
from ..domain.tools import Calculator, CurrentTime, Sleep, Tool
from ..mcp import catalog as mcp_catalog
from ..testing import call_journal
from . import app_tools, extras

if TYPE_CHECKING:
    from ..validation.run_request import RunRequest


def provider_names() -> list[str]:
    return sorted(app_settings.PROVIDERS)


def is_known_provider(name: str) -> bool:
    """Whether ``name`` is a provider of the settings or a connection kind (no sorting, no copy:
    metrics ask it after every cancel)."""
    return name in CONNECTION_CLASSES or name in app_settings.PROVIDERS


def is_known_tool(name: str) -> bool:
    """Whether ``name`` is a tool of the settings or an MCP tool this process listed (no I/O:
    metrics ask it after every tool step)."""
    return (
        name in app_settings.TOOLS
        or app_tools.get(name) is not None
        or (mcp_catalog.configured() and name in mcp_catalog.listed())
    )


def tool_names() -> list[str]:
    """Names of the tools a run can be offered: the settings', the apps' typed ones and the MCP
    catalog's (``mcp.catalog.current``)."""
    names = set(app_settings.TOOLS) | set(app_tools.tools())
    if mcp_catalog.configured():
        names.update(mcp_catalog.current().tools)
    return sorted(names)


def offered_tools(*, fresh: bool = False) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Every tool a run can be offered (built-in, from settings, from MCP servers), and broken servers.

    Each entry: ``name``, ``description``, ``source`` (``built-in``, ``settings``, ``app`` for a
    typed tool of an app's ``agent_tools`` or ``mcp``), ``server`` (an MCP server's name, else None),
    ``requires_approval``, ``idempotent``, ``transactional``. ``fresh`` lists the MCP servers now, broken ones too (a
    command); else the process's catalog.
    """
    entries = []
    for name, path in sorted(app_settings.TOOLS.items()):
        source = "settings"
        try:
            factory = import_string(path)
            # built-in by its public path or by the older private one a host's settings may name
            if name in DEFAULTS["TOOLS"] and factory is import_string(DEFAULTS["TOOLS"][name]):
                source = "built-in"
            tool = factory(None)
        except Exception as exc:  # a broken factory is named, never a crash of the listing
            entries.append(_entry(name, f"cannot be built: {type(exc).__name__}: {exc}"[:300], source, None))
            continue
        entries.append(_entry(name, tool.description, source, None, tool))
    for name, found in sorted(app_tools.tools().items()):
        if name not in app_settings.TOOLS:  # a clash (check E023): the settings' tool is the one built
            tool = found.tool
            entries.append(_entry(name, tool.description, "app", None, tool))
    if not mcp_catalog.configured():
        listing = mcp_catalog.Catalog()
    else:
        listing = mcp_catalog.refresh(force=True) if fresh else mcp_catalog.current()
    for name, mcp_tool in sorted(listing.tools.items()):
        entries.append(_entry(name, mcp_tool.description, "mcp", mcp_tool.server.name, mcp_tool))
    return entries, dict(listing.broken)


def _entry(name: str, description: str, source: str, server: str | None, tool: Any = None) -> dict[str, Any]:
    """One tool of the listing; ``tool`` ``None``: one that cannot be built (no flag set)."""
    return {
        "name": name,
        "description": description,
        "source": source,
        "server": server,
        "requires_approval": bool(getattr(tool, "requires_approval", False)),
        "idempotent": bool(getattr(tool, "idempotent", True)),
        "transactional": bool(getattr(tool, "transactional", False)),
    }


ROTATE_HINT = (
    "put the key it was encrypted with back in NRLLM_SECRET_KEYS (after the new one) "
    "and run `manage.py agent_connections rotate`"
)

# The provider class of each connection kind, by import string (a kind whose class is not
# installed fails the run's build with a ConfigurationError, never at import).
CONNECTION_CLASSES = {
    "openai": "nrllm_agents.domain.providers.openai_compat.OpenAIProvider",
    "anthropic": "nrllm_agents.domain.providers.anthropic_messages.AnthropicProvider",
    "gemini": "nrllm_agents.domain.providers.gemini.GeminiProvider",
}


def build_provider(request: RunRequest, run_id: uuid.UUID | None = None) -> Provider:
    """The provider of a run: through its connection (the key decrypted here, and only here),
    else the factory named by ``NRLLM_AGENTS["PROVIDERS"]``; journaled when the call journal is on."""
    if request.connection:
        provider = connection_provider(request, run_id)
    else:
        path = app_settings.PROVIDERS.get(request.provider)
        if path is None:
            raise ConfigurationError(f"unknown provider {request.provider!r}")
        provider = import_string(path)(request, run_id)
    return (
        call_journal.recording_provider(provider, call_journal.CallJournal(run_id=run_id))
        if call_journal.enabled()
        else provider
    )


def build_tools(names: list[str] | tuple[str, ...], run_id: uuid.UUID | None = None) -> dict[str, Tool]:
    """The tools of a run by name (from settings, else MCP); journaled when the call journal is on."""
    recording = call_journal.enabled()
    tools: dict[str, Tool] = {}
    for name in names:
        path = app_settings.TOOLS.get(name)
        if path is None:
            tool: Tool | None = app_tools.get(name) or mcp_catalog.tool(name)
            if tool is None:
                raise ConfigurationError(f"unknown tool {name!r}")
        else:
            tool = import_string(path)(run_id)
        tools[tool.name] = (
            call_journal.recording_tool(tool, call_journal.CallJournal(run_id=run_id)) if recording else tool
        )
    return tools


def scripted_provider(request: RunRequest, run_id: Any = None) -> Provider:
    return ScriptedProvider(request.script, model=request.model or "scripted-demo")


def max_tokens_of(kind: str) -> int:
    """The most answer tokens a call of a provider of ``kind`` (a connection's kind or a provider's
    name) may produce: what its request says, and what a call reserves against the shared budgets.
    ``ANTHROPIC_MAX_TOKENS`` for anthropic, ``BUDGET_MAX_TOKENS`` for every other."""
    setting = app_settings.ANTHROPIC_MAX_TOKENS if kind == "anthropic" else app_settings.BUDGET_MAX_TOKENS
    return int(setting)


def request_max_tokens(request: RunRequest) -> int:
    """``max_tokens_of`` the provider a run of ``request`` is built with (its connection's kind,
    read here, or its provider's name), without building it."""
    if request.connection:
        from ..models import Connection

        kind = Connection.objects.filter(name=request.connection).values_list("kind", flat=True).first()
        return max_tokens_of(kind or "")
    return max_tokens_of(request.provider)


def openai_provider(request: RunRequest, run_id: Any = None) -> Provider:
    extras.require(extras.PROVIDERS["openai"], "the openai provider")
    from ..domain.providers.openai_compat import OpenAIProvider

    return OpenAIProvider(
        request.model,
        timeout=app_settings.PROVIDER_TIMEOUT,
        stream=bool(app_settings.PROVIDER_STREAM),
        max_tokens=max_tokens_of("openai"),
    )


def anthropic_provider(request: RunRequest, run_id: Any = None) -> Provider:
    extras.require(extras.PROVIDERS["anthropic"], "the anthropic provider")
    from ..domain.providers.anthropic_messages import AnthropicProvider

    return AnthropicProvider(
        request.model or app_settings.ANTHROPIC_MODEL,
        timeout=app_settings.PROVIDER_TIMEOUT,
        stream=bool(app_settings.PROVIDER_STREAM),
        max_tokens=max_tokens_of("anthropic"),
    )


def gemini_provider(request: RunRequest, run_id: Any = None) -> Provider:
    extras.require(extras.PROVIDERS["gemini"], "the gemini provider")
    from ..domain.providers.gemini import GeminiProvider

    return GeminiProvider(
        request.model or app_settings.GEMINI_MODEL,
        timeout=app_settings.PROVIDER_TIMEOUT,
        stream=bool(app_settings.PROVIDER_STREAM),
        max_tokens=max_tokens_of("gemini"),
    )


def connection_provider(request: RunRequest, run_id: Any = None) -> Provider:
    from ..crypto.vault import VaultError
    from ..models import Connection

    row = Connection.objects.filter(name=request.connection).first()
    if row is None:
        raise ConfigurationError(f"connection {request.connection!r} does not exist (any more)")
    path = CONNECTION_CLASSES.get(row.kind)
    if row.kind in extras.PROVIDERS:
        extras.require(extras.PROVIDERS[row.kind], f"connection {row.name!r} ({row.kind})")
    try:
        cls = import_string(path) if path else None
    except ImportError:
        cls = None
    if cls is None:
        raise ConfigurationError(f"connection {row.name!r}: no provider for kind {row.kind!r} is installed")
    try:
        api_key, base_url = row.api_key(), row.url()
    except VaultError as exc:
        raise ConfigurationError(f"connection {row.name!r}: {exc}; {ROTATE_HINT}") from None
    if api_key is None:
        # A keyless connection (a local server) must not fall back to the SDK's own variable
        # (OPENAI_API_KEY, ANTHROPIC_API_KEY, GEMINI_API_KEY): that key would go to its server.
        api_key = PLACEHOLDER_API_KEY
    provider: Provider = cls(
        request.model or row.default_model,
        api_key=api_key,
        base_url=base_url,
        timeout=app_settings.PROVIDER_TIMEOUT,
        stream=bool(app_settings.PROVIDER_STREAM),
        connection=row.name,
        max_tokens=max_tokens_of(row.kind),
    )
    return provider


def calculator_tool(run_id: Any = None) -> Tool:
    return Calculator()


def current_time_tool(run_id: Any = None) -> Tool:
    return CurrentTime()


def sleep_tool(run_id: Any = None) -> Tool:
    return Sleep(max_seconds=app_settings.SLEEP_MAX_SECONDS)
