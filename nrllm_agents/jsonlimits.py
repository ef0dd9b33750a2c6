"""Bounds on untrusted JSON, checked without recursion.

Python's ``json`` module, DRF's serializers and any recursive walk over the result fail with
``RecursionError`` (a server error) on input nested a few hundred levels deep. Every surface
that takes JSON text (the API's parser, the playground's script field, ``agent_run --script``)
checks the nesting depth of the *text* here before parsing it, and ``RunRequest`` checks
parsed values again; both walks are iterative, so no input can exhaust the stack.
"""

from __future__ import annotations

import re
from typing import Any

MAX_JSON_DEPTH = 32  # arrays/objects inside each other; a script turn needs about 5
DEPTH_ERROR = f"JSON nested deeper than {MAX_JSON_DEPTH} levels"

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")


def text_too_deep(text: str | bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when JSON ``text`` opens more than ``limit`` arrays/objects inside each other.

    Brackets inside strings do not count. Text that is not JSON may give either answer; the
    parser that follows reports it.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if text.count("[") + text.count("{") <= limit:
        return False
    brackets = _NOT_BRACKETS.sub("", _STRINGS.sub("", text))
    depth = 0
    for ch in brackets:
        if ch in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def value_too_deep(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when a parsed JSON-like value nests lists/dicts more than ``limit`` levels deep."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, tuple, dict)):
            if depth + 1 > limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False
