"""A provider for any server speaking the OpenAI chat-completions API (OpenAI, Ollama, vLLM...).

Our transcript keeps tool calls as ``{"id", "name", "arguments": dict}``; this module
converts them to and from the wire shape. Calls stream by default (``stream=True``, usage
requested): the answer's text is published as it arrives, and a cancel shuts the connection
down at once, so the server stops generating; what arrived is kept as the interrupted step.
With streaming off, a cancel still aborts the call by closing its connection. Every SDK failure
becomes a ``ProviderError`` whose message is built here (class name, status, a short
description) with the API key scrubbed out, and which chains nothing: SDK exceptions carry the
request and its headers.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import openai

from ..cancel import CallContext, StepInterrupted
from ..errors import ConfigurationError, ProviderError
from ..steps import ModelResponse, ToolCall, Usage
from .abortable import AbortableHttp
from .failures import bounded_tokens, guarded_call, sdk_failure
from .wire import PLACEHOLDER_API_KEY, estimate_usage, parse_arguments
from .wire import field as _get

# The field that bounds an answer's tokens. OpenAI's own API deprecated ``max_tokens`` (its
# reasoning models refuse it) for ``max_completion_tokens``; the servers that speak its wire
# (vLLM, Ollama, llama.cpp, LM Studio...) all take ``max_tokens``, and some ignore the other.
BOUND_FIELDS = ("max_tokens", "max_completion_tokens")

__all__ = ["OpenAIProvider", "parse_arguments", "parse_completion", "to_wire_messages", "translate_error"]


def to_wire_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Our transcript messages in chat-completions shape.

    Assistant tool calls become ``{"id", "type": "function", "function": {"name",
    "arguments": <JSON string>}}``; calls already in wire shape pass through. Every
    other message (system, user, tool) is copied unchanged; assistant content may be None.
    """
    wire: list[dict[str, Any]] = []
    for message in messages:
        out = dict(message)
        if out.get("role") == "assistant" and out.get("tool_calls"):
            out["tool_calls"] = [_wire_call(call) for call in out["tool_calls"]]
        elif "tool_calls" in out and not out["tool_calls"]:
            del out["tool_calls"]  # some servers reject an empty list
        wire.append(out)
    return wire


def _wire_call(call: dict[str, Any]) -> dict[str, Any]:
    if "function" in call:
        return dict(call)
    arguments = call.get("arguments")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments or {}, ensure_ascii=False)
    return {"id": call["id"], "type": "function", "function": {"name": call["name"], "arguments": arguments}}


def parse_completion(completion: Any) -> ModelResponse:
    """A chat completion (SDK object or dict) as a ``ModelResponse``.

    Raises ``ProviderError`` (not retryable) when the body is not a completion or has
    no choices. Missing usage counts as zero; missing tool-call ids are generated.
    """
    if completion is None or isinstance(completion, (str, bytes)):
        raise ProviderError("malformed response: the body is not a chat completion")
    choices = _get(completion, "choices")
    if not isinstance(choices, (list, tuple)):
        raise ProviderError("malformed response: no 'choices' list")
    if not choices:
        raise ProviderError("malformed response: empty 'choices' list")
    choice = choices[0]
    message = _get(choice, "message")
    if message is None:
        raise ProviderError("malformed response: the first choice has no message")
    calls: list[ToolCall] = []
    for i, call in enumerate(_get(message, "tool_calls") or ()):
        function = _get(call, "function")
        name = _get(function, "name")
        if not isinstance(name, str) or not name:
            raise ProviderError("malformed response: a tool call has no function name")
        calls.append(
            ToolCall(
                id=str(_get(call, "id") or f"call_{i + 1}"),
                name=name,
                arguments=parse_arguments(_get(function, "arguments")),
            )
        )
    usage = _get(completion, "usage")
    content = _get(message, "content")
    finish_reason = _get(choice, "finish_reason") or ("tool_calls" if calls else "stop")
    return ModelResponse(
        content=content if content is None or isinstance(content, str) else str(content),
        tool_calls=tuple(calls),
        usage=Usage(bounded_tokens(_get(usage, "prompt_tokens")), bounded_tokens(_get(usage, "completion_tokens"))),
        finish_reason=str(finish_reason),
        model=_model(_get(completion, "model")),
    )


def _is_openai(base_url: str | None) -> bool:
    """Whether ``base_url`` is OpenAI's own API (the SDK's default when unset), Azure's included."""
    if not base_url:
        return True
    host = (urlsplit(base_url).hostname or "").lower()
    return host == "api.openai.com" or host.endswith((".openai.com", ".openai.azure.com"))


def _refuses_field(description: str, sent: str, other: str) -> bool:
    """Whether a 400 says the server does not take the field ``sent`` (OpenAI: "Unsupported
    parameter: 'max_tokens' ... Use 'max_completion_tokens' instead"; others: "Unrecognized
    request argument supplied: max_completion_tokens", "Extra inputs are not permitted")."""
    text = description.lower()
    if sent not in text:
        return False
    return other in text or any(word in text for word in ("unsupported", "not supported", "unrecognized", "extra"))


def _model(value: Any) -> str | None:
    """The answering model's name as the server gave it, when it gave a string."""
    return value if isinstance(value, str) and value else None


def _description(exc: openai.OpenAIError) -> str:
    body = _get(exc, "body")
    if isinstance(body, dict):
        inner = body.get("error", body)
        detail = inner.get("message") if isinstance(inner, dict) else inner
        if isinstance(detail, str) and detail:
            return detail
    return str(_get(exc, "message") or "no description")


def translate_error(
    exc: openai.OpenAIError, api_key: str | None, base_url: str | None = None, connection: str | None = None
) -> ProviderError:
    """A safe ``ProviderError`` for an SDK failure.

    Retryable: connection errors, timeouts, 408/409/429 and 5xx. Not retryable: other
    4xx, invalid response bodies and anything else the SDK raises. A server that cannot be
    reached, or refuses the key, is told with the variable to set.
    """
    return sdk_failure(
        type(exc).__name__,
        _description(exc),
        None if api_key == PLACEHOLDER_API_KEY else api_key,
        status=exc.status_code if isinstance(exc, openai.APIStatusError) else None,
        unreachable=isinstance(exc, openai.APIConnectionError),
        timed_out=isinstance(exc, openai.APITimeoutError),
        variables=("OPENAI_API_KEY", "OPENAI_BASE_URL"),
        base_url=base_url,
        connection=connection,
    )


class OpenAIProvider:
    """Answers chat turns through an OpenAI-compatible ``/chat/completions`` endpoint.

    Parameters
    ----------
    model: the model name sent with each request; required.
    base_url: the API root (``.../v1``); defaults to ``OPENAI_BASE_URL``, then the SDK default.
    api_key: defaults to ``OPENAI_API_KEY``, then a placeholder for keyless local servers.
    timeout: seconds per request. The SDK never retries; retrying is the runtime's decision.
    stream: stream the answer (the default); a cancel then keeps what had arrived.
    connection: the connection's name, when it is built from one: its failures name it, never its URL.
    max_tokens: the most answer tokens a call may produce, sent with every request (what a call
        reserves against the shared budgets); ``None`` sends no bound. ``max_completion_tokens``
        to OpenAI's own API, ``max_tokens`` to any other server; a server that refuses the one
        sent (HTTP 400 naming it) gets the other from then on.
    """

    name = "openai"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        stream: bool = True,
        connection: str | None = None,
        max_tokens: int | None = None,
    ) -> None:
        if not model or not isinstance(model, str) or not model.strip():
            raise ConfigurationError("the openai provider needs a model name")
        self.model = model.strip()
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        self._api_key = api_key or os.environ.get("OPENAI_API_KEY") or PLACEHOLDER_API_KEY
        self.timeout = timeout
        self.stream = stream
        self.connection = connection  # the connection's name: failures name it, never its URL
        self._stream_usage = True  # dropped once for a server that refuses stream_options
        self.max_tokens = max_tokens
        self.bound_field = BOUND_FIELDS[1] if _is_openai(self.base_url) else BOUND_FIELDS[0]
        self._http = AbortableHttp(openai.DefaultHttpxClient, timeout=timeout)
        self._client = openai.OpenAI(
            base_url=self.base_url, api_key=self._api_key, timeout=timeout, max_retries=0, http_client=self._http.client
        )

    def __repr__(self) -> str:
        return f"OpenAIProvider(model={self.model!r}, base_url={self.base_url!r})"

    def complete(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]], context: CallContext | None = None
    ) -> ModelResponse:
        """One model call; raises ``ProviderError`` (never an SDK exception) on failure.

        Raises ``StepInterrupted`` (with the text and tool-call fragments received so far)
        when the context's token trips during the call.
        """
        context = context or CallContext()
        kwargs: dict[str, Any] = {"model": self.model, "messages": to_wire_messages(messages)}
        if tools:
            kwargs["tools"] = list(tools)
        received = _Received(messages)

        def call() -> ModelResponse:
            if self.stream:
                return self._streamed(kwargs, received, context)
            return parse_completion(self._create(kwargs))

        return guarded_call(
            call,
            context,
            self._http,
            received,
            sdk_errors=(openai.OpenAIError,),
            translate=lambda exc: translate_error(exc, self._api_key, self.base_url, self.connection),
            secret=self._api_key,
        )

    def _create(self, kwargs: dict[str, Any], **streaming: Any) -> Any:
        """``chat.completions.create`` with the answer's bound; a server that refuses the bound's
        field (a 400 naming it) is asked again, once, with the other field, kept from then on."""
        completions: Any = self._client.chat.completions  # kwargs built at run time: no overload applies
        if self.max_tokens is None:
            return completions.create(**kwargs, **streaming)
        try:
            return completions.create(**kwargs, **streaming, **{self.bound_field: self.max_tokens})
        except openai.BadRequestError as exc:
            other = BOUND_FIELDS[1 - BOUND_FIELDS.index(self.bound_field)]
            if not _refuses_field(_description(exc), self.bound_field, other):
                raise
            self.bound_field = other
            return completions.create(**kwargs, **streaming, **{self.bound_field: self.max_tokens})

    def _streamed(self, kwargs: dict[str, Any], received: _Received, context: CallContext) -> ModelResponse:
        try:
            chunks = self._create(
                kwargs, stream=True, **({"stream_options": {"include_usage": True}} if self._stream_usage else {})
            )
        except openai.BadRequestError as exc:
            if not self._stream_usage or "stream_options" not in _description(exc):
                raise
            self._stream_usage = False  # this server does not take it: count usage ourselves
            chunks = self._create(kwargs, stream=True)
        try:
            for chunk in chunks:
                received.add(chunk, context)
        finally:
            chunks.close()
        if received.finish_reason is None:
            # The body ended before the answer did: cut by our abort, or by the server.
            if context.token.cancelled:
                raise received.interrupted()
            if received.chunks:
                raise ProviderError("the stream ended before the answer was complete", retryable=True)
        return received.response()


class _Received:
    """What a streamed answer has delivered so far: text, tool-call fragments, usage."""

    def __init__(self, messages: Sequence[dict[str, Any]]) -> None:
        self._messages = messages
        self.content: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: Usage | None = None
        self.finish_reason: str | None = None
        self.model: str | None = None
        self.chunks = 0

    def add(self, chunk: Any, context: CallContext) -> None:
        self.chunks += 1
        self.model = self.model or _model(_get(chunk, "model"))
        usage = _get(chunk, "usage")
        if usage is not None:
            self.usage = Usage(
                bounded_tokens(_get(usage, "prompt_tokens")), bounded_tokens(_get(usage, "completion_tokens"))
            )
        for choice in _get(chunk, "choices") or ():
            if _get(choice, "index") not in (None, 0):
                continue
            self.finish_reason = _get(choice, "finish_reason") or self.finish_reason
            delta = _get(choice, "delta")
            text = _get(delta, "content")
            if isinstance(text, str) and text:
                self.content.append(text)
                context.delta(text)
            for fragment in _get(delta, "tool_calls") or ():
                index = _get(fragment, "index")
                call = self.calls.setdefault(int(index or 0), {"id": None, "name": "", "arguments": ""})
                function = _get(fragment, "function")
                call["id"] = _get(fragment, "id") or call["id"]
                call["name"] += _get(function, "name") or ""
                call["arguments"] += _get(function, "arguments") or ""

    def response(self) -> ModelResponse:
        """The whole answer once the stream ended; raises ``ProviderError`` for a broken one."""
        calls = []
        for i, (_, call) in enumerate(sorted(self.calls.items())):
            if not call["name"]:
                raise ProviderError("malformed response: a tool call has no function name")
            calls.append(
                ToolCall(
                    id=str(call["id"] or f"call_{i + 1}"),
                    name=call["name"],
                    arguments=parse_arguments(call["arguments"]),
                )
            )
        if self.chunks == 0:
            raise ProviderError("malformed response: the stream ended without a chunk")
        return ModelResponse(
            content="".join(self.content) if self.content or not calls else None,
            tool_calls=tuple(calls),
            usage=self.usage or Usage(),
            finish_reason=str(self.finish_reason or ("tool_calls" if calls else "stop")),
            model=self.model,
        )

    def interrupted(self) -> StepInterrupted:
        """The ``StepInterrupted`` for a call cut short: the text so far and its (estimated) usage."""
        partial = ModelResponse(
            content="".join(self.content), usage=self.usage or self._estimate(), finish_reason="interrupted"
        )
        fragments = [{"index": i, **call} for i, call in sorted(self.calls.items())]
        return StepInterrupted(partial=partial, usage_estimated=self.usage is None, partial_tool_calls=fragments)

    def _estimate(self) -> Usage:
        arrived = sum(len(t) for t in self.content) + sum(
            len(c["arguments"]) + len(c["name"]) for c in self.calls.values()
        )
        return estimate_usage(self._messages, arrived)
