"""Tool names as the model sees them: ``<server>__<tool>``, valid for every provider.

OpenAI, Anthropic and Gemini all accept ``^[a-zA-Z][a-zA-Z0-9_-]{0,63}$``; a name that would
break it has its other characters replaced by ``_``, is prefixed ``mcp_`` when it would not
start with a letter, and is cut to 64 characters with a short hash of the original, so two
different tools never share a name. Plain Python: no Django.
"""

from __future__ import annotations

import hashlib
import re

VALID = re.compile(r"^[a-zA-Z][a-zA-Z0-9_-]{0,63}$")
_OTHER = re.compile(r"[^a-zA-Z0-9_-]")
SEPARATOR = "__"
MAX = 64


def tool_name(server: str, tool: str) -> str:
    """The offered name of MCP tool ``tool`` of server ``server``; always matches ``VALID``."""
    raw = f"{server}{SEPARATOR}{tool}"
    name = _OTHER.sub("_", raw)
    if not name[:1].isalpha() or not name[:1].isascii():
        name = "mcp_" + name
    if len(name) > MAX:
        name = f"{name[: MAX - 9]}_{hashlib.sha1(raw.encode()).hexdigest()[:8]}"
    return name  # two tools whose names differ only in replaced characters: see unique()


def unique(names: dict[tuple[str, str], str]) -> dict[tuple[str, str], str]:
    """``names`` with any name shared by two tools suffixed by a hash of its tool, so none collide."""
    seen: dict[str, int] = {}
    for name in names.values():
        seen[name] = seen.get(name, 0) + 1
    out = {}
    for (server, tool), name in names.items():
        if seen[name] > 1:
            digest = hashlib.sha1(f"{server}\0{tool}".encode()).hexdigest()[:8]
            name = f"{name[: MAX - 9]}_{digest}"
        out[(server, tool)] = name
    return out
