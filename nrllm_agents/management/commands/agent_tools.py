"""manage.py agent_tools: every tool a run can be offered, built-in, from settings and from MCP servers."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from nrllm_agents.catalog import registry
from nrllm_agents.presentation.describe import short


class Command(BaseCommand):
    help = (
        'List every tool a run can be offered (--tool NAME, "tools": [...]): built-in ones, those of '
        "NRLLM_AGENTS['TOOLS'], and those of the MCP servers configured (NRLLM_MCP_CONFIG, MCP_SERVERS), "
        "with their description, source server and whether a call waits for approval. Starts the MCP "
        "servers to list them; exits 1 naming every server that could not be listed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="One JSON document: tools and broken servers.")

    def handle(self, *args: Any, json: bool = False, **options: Any) -> None:
        tools, broken = registry.offered_tools(fresh=True)
        if json:
            self.stdout.write(_dumps({"tools": tools, "unavailable": broken}))
        else:
            for tool in tools:
                source = f"mcp:{tool['server']}" if tool["server"] else tool["source"]
                approval = "approval" if tool["requires_approval"] else "-"
                described = _printable(short(tool["description"], 80))
                self.stdout.write(f"{tool['name']:<40} {_printable(source):<20} {approval:<9} {described}")
        if broken:
            names = "; ".join(f"{server}: {_printable(short(why, 300))}" for server, why in sorted(broken.items()))
            raise CommandError(f"MCP servers unavailable: {names}", returncode=1)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True, sort_keys=True)


def _printable(text: str) -> str:
    """``text`` with control characters (terminal escapes) shown as ``?``."""
    return "".join(c if c.isprintable() else "?" for c in text)
