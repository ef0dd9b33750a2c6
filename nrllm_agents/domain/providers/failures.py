"""What every provider does with a failure: one safe message, the key scrubbed before any cut.

A provider error's text comes from the model server (its error body, echoed headers, a URL),
and servers do echo keys, whole or masked. ``describe_failure`` therefore scrubs first (the
configured key itself, then anything shaped like any vendor's key or auth header) and only then
cuts to a readable length, so no cut can leave half a key behind. ``bounded_tokens`` reads one
token count from a response, refusing what no real server sends. Plain Python, no SDK.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import urlsplit

from ..cancel import CallContext, StepInterrupted
from ..errors import ProviderError
from ..steps import ModelResponse
from .abortable import AbortableHttp

MAX_DESCRIPTION_CHARS = 200
MAX_CALL_TOKENS = 100_000_000  # per model call; a count above it is a broken or hostile server
REDACTED = "[redacted]"
# Key-shaped tokens, even partially masked ("sk-abc***xyz"): OpenAI and Anthropic keys
# (sk-..., sk-ant-...), Google API keys (AIza...), auth headers and the key query parameter (a
# value of six characters or more: "set OPENAI_API_KEY: the server..." is advice, not a key).
_KEY_PATTERN = re.compile(
    r"\bsk-[A-Za-z0-9_\-*.]{4,}"
    r"|\bAIza[A-Za-z0-9_\-*.]{4,}"
    r"|(?i:bearer)\s+\S+"
    r"|(?i:x-api-key|x-goog-api-key|api[_-]?key)[\"']?\s*[:=]\s*[\"']?[^\s\"',;}&]{6,}"
    r"|(?i:[?&]key=)[^\s&\"']+"
)
_FRAGMENT = 8  # a token holding this many leading or trailing characters of the key is the key, masked


def redact(text: str, secret: str | None = None) -> str:
    """``text`` with the secret, tokens holding a piece of it, and any key-shaped token replaced."""
    if secret and len(secret) >= 4:
        text = text.replace(secret, REDACTED)
        if len(secret) >= 2 * _FRAGMENT:
            pieces = (secret[:_FRAGMENT], secret[-_FRAGMENT:])
            text = re.sub(r"\S+", lambda m: REDACTED if any(p in m.group() for p in pieces) else m.group(), text)
    return _KEY_PATTERN.sub(REDACTED, text)


def hide_address(text: str, base_url: str | None, label: str) -> str:
    """``text`` with the URL ``base_url`` and each part of it that locates or opens the server
    (the userinfo, the host, the port, the query) replaced by ``label``."""
    if not base_url:
        return text
    try:
        parts = urlsplit(base_url)
        port = parts.port
    except ValueError:  # not a URL after all: hide it whole
        return text.replace(base_url, label)
    host = parts.hostname or ""
    userinfo = parts.netloc.rpartition("@")[0]
    pieces = {base_url, base_url.rstrip("/"), parts.netloc, userinfo, parts.query, host, f"[{host}]"}
    pieces.update(p for p in (parts.username, parts.password) if p)
    for piece in sorted((p for p in pieces if len(p) >= 3), key=len, reverse=True):
        text = text.replace(piece, label)
    return re.sub(rf"(?<![0-9]){port}(?![0-9])", label, text) if port else text


def describe_failure(
    kind: str,
    status: int | None,
    description: Any,
    secret: str | None,
    *,
    hint: str | None = None,
    limit: int = MAX_DESCRIPTION_CHARS,
) -> str:
    """``Kind (HTTP 401): description (hint)`` on one line: scrubbed first, then cut to ``limit``.

    ``hint`` (what to set to fix it: the caller's own words, anything from outside in it
    scrubbed by the caller) is appended whole after the cut.
    """
    # Scrubbed over far more than is kept: a key that starts within the kept part ends well
    # inside the scrubbed one, and a megabyte of error body costs no more than this much.
    text = redact(" ".join(str(description or "no description").split())[: 50 * limit], secret)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    where = f" (HTTP {status})" if status is not None else ""
    advice = f" ({hint})" if hint else ""
    return f"{kind}{where}: {text}{advice}"


def retryable_status(status: int) -> bool:
    """Whether an HTTP status is worth asking again: timeouts, conflicts, rate limits, 5xx."""
    return status in (408, 409, 429) or status >= 500


def bounded_tokens(value: Any) -> int:
    """A token count from a response (absent: 0); ``ProviderError`` for a wrong type or range."""
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():  # 12.0 from a lenient server
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_CALL_TOKENS:
        raise ProviderError(f"malformed response: a token count is not an integer from 0 to {MAX_CALL_TOKENS}")
    return value


def sdk_failure(
    kind: str,
    description: Any,
    secret: str | None,
    *,
    status: int | None = None,
    unreachable: bool = False,
    timed_out: bool = False,
    variables: tuple[str, str],
    base_url: str | None = None,
    connection: str | None = None,
) -> ProviderError:
    """The ``ProviderError`` for an SDK's failure, whichever the SDK.

    ``kind`` is the SDK's error class name; ``status`` the HTTP status, if one came back;
    ``unreachable`` / ``timed_out`` a connection that failed or went silent. Retryable: those,
    and 408/409/429/5xx. A server that cannot be reached, or that refuses the key, is told with
    the variable to set (``variables``: the key's, then the base URL's); through a
    ``connection`` (its name), with the connection instead, and nothing of its URL (its
    userinfo, host, port or query) in the message: whoever may use a connection may not see it.
    """
    key_variable, url_variable = variables
    hint = None
    label = f"[connection {connection!r}]" if connection else ""
    if connection:
        description = hide_address(str(description or "no description"), base_url, label)
    if status is not None:
        retryable = retryable_status(status)
        if status in (401, 403):
            hint = (
                f"connection {connection!r}: the server refused its key (agent_connections add --replace)"
                if connection
                else f"set {key_variable}: the server refused the key"
            )
    else:
        retryable = unreachable or timed_out
        if unreachable and not timed_out:
            if connection:
                hint = f"no server answered for connection {connection!r}: check its base URL"
            else:
                where = redact(base_url, secret) if base_url else "the default API"
                hint = f"set {url_variable}: no server answered at {where}"
    message = describe_failure(kind, status, description, secret, hint=hint)
    if connection:  # a cut could leave part of the address a whole one would have matched
        message = hide_address(message, base_url, label)
    return ProviderError(message, retryable=retryable, status_code=status)


class Interruptible(Protocol):
    """What a provider's call has received so far; ``interrupted()`` is what a cancel keeps."""

    def interrupted(self) -> StepInterrupted: ...


def guarded_call(
    call: Callable[[], ModelResponse],
    context: CallContext,
    http: AbortableHttp,
    received: Interruptible,
    *,
    sdk_errors: tuple[type[Exception], ...],
    translate: Callable[[Any], ProviderError],
    secret: str | None,
) -> ModelResponse:
    """Run one model call so that it ends in a ``ModelResponse``, a ``ProviderError`` or, once the
    context's token trips (``http.abort`` then cuts the connection, even one not yet opened), the
    ``StepInterrupted`` holding what had arrived. The error is raised outside every handler, so it
    chains nothing: SDK exceptions carry the request and its headers. The call's HTTP requests
    carry the context's trace headers.
    """
    http.arm()
    http.carry(context.headers)
    unregister = context.token.on_cancel(http.abort)
    error: ProviderError
    try:
        return call()
    except ProviderError as exc:
        error = exc
    except sdk_errors as exc:
        error = translate(exc)
    except ValueError as exc:  # an undecodable body or event
        error = ProviderError(redact(f"malformed response: {type(exc).__name__}", secret))
    except (TypeError, AttributeError, KeyError, IndexError, ArithmeticError):  # wrong types in a lenient parse
        error = ProviderError("malformed response: unexpected field types")
    except Exception:
        if not context.token.cancelled:
            raise
        error = ProviderError("aborted")
    finally:
        unregister()
    if context.token.cancelled:  # the abort broke the call: keep what had arrived
        raise received.interrupted() from None
    raise error from None
