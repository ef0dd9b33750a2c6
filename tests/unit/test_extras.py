"""A feature whose extra is not installed is named: by a system check, and by the run's error."""

from __future__ import annotations

import pytest

from nrllm_agents import checks
from nrllm_agents.catalog import extras, registry
from nrllm_agents.domain import ConfigurationError
from nrllm_agents.validation.run_request import RunRequest


@pytest.fixture
def anthropic_missing(monkeypatch):
    monkeypatch.setitem(extras.PROVIDERS, "anthropic", extras.Extra("anthropic", ("nrllm_no_such_sdk",)))


def test_the_check_names_the_extra_of_the_default_provider(settings, anthropic_missing) -> None:
    settings.NRLLM_AGENTS = {"DEFAULT_PROVIDER": "anthropic"}
    (error,) = checks.check_extras()
    assert error.id == "nrllm_agents.E020"
    assert "nrllm_no_such_sdk" in error.msg and error.hint == 'pip install "nrllm-agents[anthropic]"'


def test_the_check_names_the_mcp_extra_when_servers_are_configured(settings, monkeypatch) -> None:
    monkeypatch.setattr(extras, "MCP", extras.Extra("mcp", ("nrllm_no_such_mcp",)))
    settings.NRLLM_AGENTS = {"MCP_SERVERS": {"mcpServers": {"x": {"command": "true"}}}}
    (error,) = checks.check_extras()
    assert error.hint == 'pip install "nrllm-agents[mcp]"'


def test_installed_extras_pass_the_check(settings) -> None:
    settings.NRLLM_AGENTS = {"DEFAULT_PROVIDER": "anthropic"}
    assert checks.check_extras() == []


def test_a_run_on_a_provider_without_its_sdk_fails_with_the_extra_named(anthropic_missing) -> None:
    with pytest.raises(ConfigurationError, match=r"nrllm-agents\[anthropic\]"):
        registry.anthropic_provider(RunRequest(prompt="hi", provider="anthropic"))


def test_a_parent_package_missing_counts_as_missing() -> None:
    assert extras.Extra("gemini", ("nrllm_no_such_parent.genai",)).missing() == "nrllm_no_such_parent.genai"
