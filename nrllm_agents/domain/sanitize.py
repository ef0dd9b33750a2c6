"""What a provider or a tool hands back, made storable once, where it enters the domain.

A model answer, a tool-call argument or a tool result is text from outside: a NUL character
or a lone surrogate (``"a\\ud800b"``) in it cannot be stored (PostgreSQL refuses both in text
and JSON), and a token count outside any real call's range (negative, or three billion)
cannot be added to a run's spend. The loop passes every response and result through here
before it becomes a step, so the store never meets them:

- NUL is dropped; a lone surrogate becomes U+FFFD (the replacement character);
- a token count is bounded to ``0..MAX_TOKENS_PER_CALL``; the step then says what the
  provider reported (``usage_note``).

Terminal control characters are left in the text (they are data); every terminal output
escapes them (``management/console.py``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .steps import ModelResponse, ToolCall, Usage

# No model call spends this many tokens: the largest context windows hold about 2 million.
# With MAX_ITERATIONS_LIMIT (100) calls a run, a run's spend stays inside a 32-bit count.
MAX_TOKENS_PER_CALL = 10_000_000
REPLACEMENT = "\ufffd"


def clean_text(text: str) -> str:
    """``text`` without NUL and with each lone surrogate replaced by U+FFFD."""
    if "\x00" in text:
        text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = "".join(REPLACEMENT if 0xD800 <= ord(ch) <= 0xDFFF else ch for ch in text)
    return text


def clean_value(value: Any) -> Any:
    """A JSON-like value with every string in it (keys included) cleaned; iterative, so no
    depth of nesting exhausts the stack. Values that need no change are returned as they are."""
    if isinstance(value, str):
        return clean_text(value)
    if not isinstance(value, (dict, list, tuple)):
        return value
    root: list[Any] = [value]
    stack: list[tuple[Any, Any, Any]] = [(root, 0, value)]  # (container to write into, key, source)
    while stack:
        target, key, source = stack.pop()
        if isinstance(source, dict):
            copy: dict[Any, Any] = {}
            target[key] = copy
            for k, v in source.items():
                k = clean_text(k) if isinstance(k, str) else k
                copy[k] = None
                stack.append((copy, k, v))
        elif isinstance(source, (list, tuple)):
            items: list[Any] = [None] * len(source)
            target[key] = items
            stack.extend((items, i, v) for i, v in enumerate(source))
        elif isinstance(source, str):
            target[key] = clean_text(source)
        else:
            target[key] = source
    return root[0]


def _bounded(count: Any) -> int:
    try:
        number = int(count)
    except (TypeError, ValueError, OverflowError):
        return 0
    return min(max(number, 0), MAX_TOKENS_PER_CALL)


def clean_usage(usage: Usage) -> tuple[Usage, str | None]:
    """``usage`` bounded to what one call can spend, and a note naming what was out of range."""
    bounded = Usage(_bounded(usage.prompt_tokens), _bounded(usage.completion_tokens))
    if bounded == usage:
        return usage, None
    reported = f"prompt_tokens={usage.prompt_tokens!r}, completion_tokens={usage.completion_tokens!r}"
    return bounded, (
        f"the provider reported {reported[:200]}, outside 0..{MAX_TOKENS_PER_CALL:,} per call; "
        f"recorded as prompt_tokens={bounded.prompt_tokens}, completion_tokens={bounded.completion_tokens}"
    )


def clean_call(call: ToolCall) -> ToolCall:
    return ToolCall(clean_text(str(call.id)), clean_text(str(call.name)), clean_value(dict(call.arguments)))


def clean_response(response: ModelResponse) -> tuple[ModelResponse, str | None]:
    """A provider's response made storable, and the usage note (None when the usage was sound)."""
    usage, note = clean_usage(response.usage)
    return (
        replace(
            response,
            content=None if response.content is None else clean_text(str(response.content)),
            tool_calls=tuple(clean_call(c) for c in response.tool_calls),
            usage=usage,
            finish_reason=clean_text(str(response.finish_reason)),
            model=None if response.model is None else clean_text(str(response.model))[:200] or None,
        ),
        note,
    )
