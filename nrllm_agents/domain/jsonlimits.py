"""Bounds on untrusted JSON, checked without recursion.

Python's ``json`` module, DRF's serializers and any recursive walk over the result fail with
``RecursionError`` (a server error) on input nested a few hundred levels deep. Every surface
that takes JSON text (the API's parser, the playground's script field, ``agent_run --script``)
checks the nesting depth of the *text* here before parsing it, and ``RunRequest`` checks
parsed values again; both walks are iterative, so no input can exhaust the stack.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_JSON_DEPTH = 32  # arrays/objects inside each other; a script turn needs about 5
DEPTH_ERROR = f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
MAX_NUMBER_CHARS = 40  # a number literal longer than this is no count, delay or id of ours
NUMBER_ERROR = f"a number longer than {MAX_NUMBER_CHARS} characters"
# the most a JSON value kept for a client may hold, as compact JSON: a run's script, a run's or a
# thread's metadata (every later read of it returns all of it)
MAX_VALUE_BYTES = 256 * 1024
SIZE_ERROR = f"at most {MAX_VALUE_BYTES // 1024} KiB of JSON"


class JSONRefused(ValueError):
    """Untrusted JSON text that is not accepted; the message says why, in one line, and
    holds no piece of the input."""


def _int(literal: str) -> int:
    if len(literal) > MAX_NUMBER_CHARS:
        raise JSONRefused(NUMBER_ERROR)
    return int(literal)


def _float(literal: str) -> float:
    value = float(literal) if len(literal) <= MAX_NUMBER_CHARS else math.inf
    if not math.isfinite(value):
        raise JSONRefused(NUMBER_ERROR if len(literal) > MAX_NUMBER_CHARS else "a number too large to represent")
    return value


def _constant(name: str) -> Any:
    raise JSONRefused(f"{name} is not a JSON number")


def loads(text: str | bytes) -> Any:
    """Parse untrusted JSON text: depth-checked first, number literals bounded, no ``NaN`` or
    ``Infinity``. Every surface that takes JSON text calls this (the API's parser, the
    playground's script field, ``--script``).

    Raises ``JSONRefused`` with a one-line message (``not valid JSON: Expecting value (line 1,
    column 1)``, the depth or the number bound).
    """
    if text_too_deep(text):
        raise JSONRefused(DEPTH_ERROR)
    try:
        return json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except JSONRefused:
        raise
    except json.JSONDecodeError as exc:
        raise JSONRefused(f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except (ValueError, UnicodeDecodeError) as exc:  # undecodable bytes, or a bound of the parser
        raise JSONRefused(f"not valid JSON: {type(exc).__name__}") from None


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


def value_too_large(value: Any, limit: int = MAX_VALUE_BYTES) -> bool:
    """True when a parsed JSON-like value takes more than ``limit`` bytes as compact JSON."""
    return len(json.dumps(value, separators=(",", ":"), default=str).encode()) > limit


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
