"""Which optional extra of the distribution each feature needs, and whether it is installed.

A plain ``pip install nrllm-agents`` runs the scripted provider on SQLite; a vendor SDK, the MCP
client, the PostgreSQL driver or the OTLP exporter come with an extra (``pip install
"nrllm-agents[anthropic]"``). Their modules are imported on first use, so a missing extra is
named here: by a system check when the settings ask for the feature, and by the error of a run
that needs it.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass


@dataclass(frozen=True)
class Extra:
    """An extra of the distribution: its name and the top-level modules it brings."""

    name: str
    modules: tuple[str, ...]

    def missing(self) -> str | None:
        """The first of the extra's modules that cannot be found, else None."""
        for module in self.modules:
            try:
                if importlib.util.find_spec(module) is None:
                    return module
            except (ImportError, ValueError):  # a parent package missing (google for google.genai)
                return module
        return None

    def hint(self) -> str:
        return f'pip install "nrllm-agents[{self.name}]"'


# provider name (and connection kind) -> the extra of its SDK
PROVIDERS: dict[str, Extra] = {
    "openai": Extra("openai", ("openai",)),
    "anthropic": Extra("anthropic", ("anthropic",)),
    "gemini": Extra("gemini", ("google.genai",)),
}
MCP = Extra("mcp", ("mcp", "jsonschema"))
POSTGRES = Extra("postgres", ("psycopg",))


def require(extra: Extra, feature: str) -> None:
    """Raise ``ConfigurationError`` naming the extra when ``feature`` cannot run without it."""
    missing = extra.missing()
    if missing is not None:
        from ..domain.errors import ConfigurationError

        raise ConfigurationError(f"{feature} needs {missing!r}, which is not installed: {extra.hint()}")
