"""Builds providers and tools by name from settings."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from django.utils.module_loading import import_string

from .conf import app_settings
from .domain import ConfigurationError
from .domain.providers import CallJournal, Provider, ScriptedProvider
from .domain.tools import Calculator, CurrentTime, Sleep, Tool

if TYPE_CHECKING:
    from .run_request import RunRequest


def provider_names() -> list[str]:
    return sorted(app_settings.PROVIDERS)


def tool_names() -> list[str]:
    return sorted(app_settings.TOOLS)


def build_provider(request: RunRequest, run_id: uuid.UUID | None = None) -> Provider:
    path = app_settings.PROVIDERS.get(request.provider)
    if path is None:
        raise ConfigurationError(f"unknown provider {request.provider!r}")
    return import_string(path)(request, run_id)


def build_tools(names: list[str] | tuple[str, ...], run_id: uuid.UUID | None = None) -> dict[str, Tool]:
    tools: dict[str, Tool] = {}
    for name in names:
        path = app_settings.TOOLS.get(name)
        if path is None:
            raise ConfigurationError(f"unknown tool {name!r}")
        tool = import_string(path)(run_id)
        tools[tool.name] = tool
    return tools


def scripted_provider(request: RunRequest, run_id: Any = None) -> Provider:
    return ScriptedProvider(request.script, model=request.model or "scripted-demo", journal=CallJournal(run_id=run_id))


def openai_provider(request: RunRequest, run_id: Any = None) -> Provider:
    from .domain.providers.openai_compat import OpenAIProvider

    return OpenAIProvider(
        request.model,
        timeout=app_settings.OPENAI_TIMEOUT,
        stream=bool(app_settings.OPENAI_STREAM),
        journal=CallJournal(run_id=run_id),
    )


def anthropic_provider(request: RunRequest, run_id: Any = None) -> Provider:
    from .domain.providers.anthropic_messages import AnthropicProvider

    return AnthropicProvider(
        request.model or app_settings.ANTHROPIC_MODEL,
        timeout=app_settings.OPENAI_TIMEOUT,
        stream=bool(app_settings.OPENAI_STREAM),
        journal=CallJournal(run_id=run_id),
        max_tokens=int(app_settings.ANTHROPIC_MAX_TOKENS),
    )


def gemini_provider(request: RunRequest, run_id: Any = None) -> Provider:
    from .domain.providers.gemini import GeminiProvider

    return GeminiProvider(
        request.model or app_settings.GEMINI_MODEL,
        timeout=app_settings.OPENAI_TIMEOUT,
        stream=bool(app_settings.OPENAI_STREAM),
        journal=CallJournal(run_id=run_id),
    )


def calculator_tool(run_id: Any = None) -> Tool:
    return Calculator(journal=CallJournal(run_id=run_id))


def current_time_tool(run_id: Any = None) -> Tool:
    return CurrentTime(journal=CallJournal(run_id=run_id))


def sleep_tool(run_id: Any = None) -> Tool:
    return Sleep(max_seconds=app_settings.SLEEP_MAX_SECONDS, journal=CallJournal(run_id=run_id))
