"""Typed tools (``@tool``) from the installed apps' ``agent_tools`` modules.

Found once at start-up, the way the admin autodiscovers ``admin.py``: the app's ``ready()`` calls
:func:`discover`, which imports ``<app>.agent_tools`` for every installed app that has one and
keeps the ``FunctionTool`` objects it holds. No settings edit, and nothing registers itself at
import: a module that is never discovered offers nothing.

Two tools of one name (two apps, an app and ``NRLLM_AGENTS["TOOLS"]``, an app and an MCP tool)
are a system check error naming both (``nrllm_agents.E023``); until fixed, the first app's wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module

from ..domain.tools.typed import FunctionTool

MODULE = "agent_tools"


@dataclass(frozen=True)
class Found:
    """A typed tool and where it was found."""

    tool: FunctionTool
    app: str  # the app's label
    module: str  # the dotted path of the agent_tools module


_tools: dict[str, Found] = {}
_clashes: list[tuple[Found, Found]] = []


def discover() -> None:
    """Import every installed app's ``agent_tools`` module and keep the typed tools it holds.

    An import error propagates (start-up fails naming the module, as a broken ``admin.py`` does).
    Called again, it starts over (tests that install an app).
    """
    from django.apps import apps
    from django.utils.module_loading import module_has_submodule

    found: dict[str, Found] = {}
    clashes: list[tuple[Found, Found]] = []
    seen: set[int] = set()
    for config in apps.get_app_configs():
        if not module_has_submodule(config.module, MODULE):
            continue
        path = f"{config.name}.{MODULE}"
        module = import_module(path)
        for value in vars(module).values():
            if not isinstance(value, FunctionTool) or id(value) in seen:
                continue
            seen.add(id(value))
            here = Found(value, config.label, path)
            if value.name in found:
                clashes.append((found[value.name], here))
            else:
                found[value.name] = here
    _tools.clear()
    _tools.update(found)
    _clashes[:] = clashes


def tools() -> dict[str, Found]:
    """The discovered tools by name."""
    return dict(_tools)


def names() -> frozenset[str]:
    return frozenset(_tools)


def get(name: str) -> FunctionTool | None:
    found = _tools.get(name)
    return found.tool if found is not None else None


def clashes() -> list[tuple[Found, Found]]:
    """Pairs of discovered tools of one name: the one kept, and the one left out."""
    return list(_clashes)
