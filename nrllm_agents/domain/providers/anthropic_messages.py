"""A provider for Anthropic's Messages API (Claude), on the official ``anthropic`` SDK.

Our transcript's system messages become the request's ``system`` text; an assistant turn's
tool calls become ``tool_use`` blocks (``input`` a dict); our ``tool`` messages become
``tool_result`` blocks, the results of one turn gathered in one user message as the API
requires. Calls stream by default: ``text_delta`` pieces are published as they arrive,
``input_json_delta`` pieces build each tool's input, ``message_start`` / ``message_delta``
carry the usage. A cancel shuts the connection down at once (``abortable.py``); what arrived
is kept on the interrupted step. Every failure becomes a ``ProviderError`` named by the SDK's
error class and HTTP status, scrubbed of the key (``failures.py``), chaining nothing.

Configuration follows the SDK: ``ANTHROPIC_API_KEY`` and ``ANTHROPIC_BASE_URL`` unless given.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import anthropic

from ..cancel import CallContext, StepInterrupted
from ..errors import ConfigurationError, ProviderError
from ..steps import ModelResponse, ToolCall, Usage
from .abortable import AbortableHttp
from .failures import bounded_tokens, guarded_call, sdk_failure
from .wire import call_arguments, call_name, declarations, estimate_usage, field, parse_arguments, text_of

DEFAULT_MAX_TOKENS = 4096
VARIABLES = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")
_TRANSIENT_ERRORS = frozenset({"overloaded_error", "api_error", "rate_limit_error", "timeout_error"})
_FINISH = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length", "stop_sequence": "stop"}


def to_anthropic(messages: Sequence[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """Our transcript as ``(system, messages)`` for the Messages API.

    Consecutive user-side messages (tool results, then a user's text) share one user
    message, so that every ``tool_use`` is answered in the message right after it. An
    assistant turn with neither text nor calls is left out (the API refuses empty blocks).
    """
    system: list[str] = []
    wire: list[dict[str, Any]] = []

    def user_blocks() -> list[dict[str, Any]]:
        if wire and wire[-1]["role"] == "user":
            return wire[-1]["content"]  # type: ignore[no-any-return]
        wire.append({"role": "user", "content": []})
        return wire[-1]["content"]  # type: ignore[no-any-return]

    for message in messages:
        role, content = message.get("role"), message.get("content")
        if role == "system":
            system.append(text_of(content))
        elif role == "tool":
            text = text_of(content)
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": str(message.get("tool_call_id"))}
            if text:
                block["content"] = text
            if text.startswith("error: "):
                block["is_error"] = True
            user_blocks().append(block)
        elif role == "assistant":
            blocks: list[dict[str, Any]] = []
            if text_of(content):
                blocks.append({"type": "text", "text": text_of(content)})
            for call in message.get("tool_calls") or ():
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": str(call.get("id")),
                        "name": call_name(call),
                        "input": call_arguments(call),
                    }
                )
            if blocks:
                wire.append({"role": "assistant", "content": blocks})
        elif text_of(content):
            user_blocks().append({"type": "text", "text": text_of(content)})
    return ("\n\n".join(s for s in system if s) or None), wire


def to_anthropic_tools(tools: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"name": name, "description": description, "input_schema": parameters}
        for name, description, parameters in declarations(tools)
    ]


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise ProviderError("malformed response: a text field is not a string")
    return value


def _prompt_tokens(usage: Any) -> int:
    """Input tokens, cached ones included (the API counts those apart)."""
    return (
        bounded_tokens(field(usage, "input_tokens"))
        + bounded_tokens(field(usage, "cache_creation_input_tokens"))
        + bounded_tokens(field(usage, "cache_read_input_tokens"))
    )


def parse_message(message: Any) -> ModelResponse:
    """A whole (non-streamed) Messages API answer as a ``ModelResponse``."""
    blocks = field(message, "content")
    if not isinstance(blocks, (list, tuple)):
        raise ProviderError("malformed response: the body is not a message with content blocks")
    text: list[str] = []
    calls: list[ToolCall] = []
    for block in blocks:
        kind = field(block, "type")
        if kind == "text":
            text.append(_string(field(block, "text")))
        elif kind == "tool_use":
            calls.append(_tool_call(field(block, "id"), field(block, "name"), field(block, "input"), len(calls)))
    usage = field(message, "usage")
    stop = field(message, "stop_reason")
    return ModelResponse(
        content="".join(text) if text or not calls else None,
        tool_calls=tuple(calls),
        usage=Usage(_prompt_tokens(usage), bounded_tokens(field(usage, "output_tokens"))),
        finish_reason=_FINISH.get(str(stop), str(stop)) if stop else ("tool_calls" if calls else "stop"),
        model=_model(field(message, "model")),
    )


def _model(value: Any) -> str | None:
    """The answering model's name as the server gave it, when it gave a string."""
    return value if isinstance(value, str) and value else None


def _tool_call(call_id: Any, name: Any, arguments: Any, index: int) -> ToolCall:
    if not isinstance(name, str) or not name:
        raise ProviderError("malformed response: a tool_use block has no name")
    return ToolCall(id=str(call_id or f"toolu_{index + 1}"), name=name, arguments=parse_arguments(arguments))


def translate_error(
    exc: anthropic.AnthropicError, api_key: str | None, base_url: str | None, connection: str | None = None
) -> ProviderError:
    """A safe ``ProviderError`` for an SDK failure; retryable for connection errors, 408/409/429, 5xx."""
    body = field(exc, "body")
    inner = field(body, "error") if isinstance(body, dict) else None
    detail = field(inner, "message") if isinstance(inner, dict) else None
    status = exc.status_code if isinstance(exc, anthropic.APIStatusError) else None
    in_stream = status is not None and status < 400  # an ``error`` event inside a streamed 200
    error = sdk_failure(
        type(exc).__name__,
        detail if isinstance(detail, str) and detail else field(exc, "message") or str(exc),
        api_key,
        status=None if in_stream else status,
        unreachable=isinstance(exc, anthropic.APIConnectionError),
        timed_out=isinstance(exc, anthropic.APITimeoutError),
        variables=VARIABLES,
        base_url=base_url,
        connection=connection,
    )
    if in_stream:  # e.g. overloaded_error mid-answer: as retryable as its HTTP status would be
        error.retryable = field(inner, "type") in _TRANSIENT_ERRORS
    return error


class AnthropicProvider:
    """Answers chat turns through Anthropic's Messages API.

    Parameters
    ----------
    model: the model name sent with each request; required.
    api_key: defaults to the SDK's ``ANTHROPIC_API_KEY`` (else its ``ANTHROPIC_AUTH_TOKEN``).
    base_url: the API root; defaults to the SDK's ``ANTHROPIC_BASE_URL``, then Anthropic's.
    timeout: seconds per request. The SDK never retries; retrying is the runtime's decision.
    stream: stream the answer (the default); a cancel then keeps what had arrived.
    max_tokens: the most output tokens a call may generate (the API requires a bound).
    connection: the connection's name, when it is built from one: its failures name it, never its URL.
    """

    name = "anthropic"

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        stream: bool = True,
        connection: str | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
    ) -> None:
        if not model or not isinstance(model, str) or not model.strip():
            raise ConfigurationError("the anthropic provider needs a model name")
        self.model = model.strip()
        self.base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or None
        self._api_key = api_key or os.environ.get("ANTHROPIC_API_KEY") or None
        self.timeout = timeout
        self.stream = stream
        self.connection = connection  # the connection's name: failures name it, never its URL
        self.max_tokens = max_tokens
        # A gateway's bearer token, the SDK's other variable, when no key is set.
        token = None if self._api_key else os.environ.get("ANTHROPIC_AUTH_TOKEN") or None
        self._http = AbortableHttp(anthropic.DefaultHttpxClient, timeout=timeout)
        self._client = (
            anthropic.Anthropic(
                **({"api_key": self._api_key} if self._api_key else {"auth_token": token}),
                base_url=self.base_url,
                timeout=timeout,
                max_retries=0,
                http_client=self._http.client,
            )
            if self._api_key or token
            else None
        )
        self._api_key = self._api_key or token  # the secret every message is scrubbed of

    def __repr__(self) -> str:
        return f"AnthropicProvider(model={self.model!r}, base_url={self.base_url!r})"

    def complete(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]], context: CallContext | None = None
    ) -> ModelResponse:
        """One model call; raises ``ProviderError`` (never an SDK exception) on failure.

        Raises ``StepInterrupted`` (with the text and tool-input fragments received so far)
        when the context's token trips during the call.
        """
        context = context or CallContext()
        client = self._client
        if client is None:
            raise ProviderError(f"no API key for the anthropic provider: set {VARIABLES[0]}")
        system, wire = to_anthropic(messages)
        kwargs: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens, "messages": wire}
        if system:
            kwargs["system"] = system
        if tools:
            kwargs["tools"] = to_anthropic_tools(tools)
        received = _Received(messages)

        def call() -> ModelResponse:
            if self.stream:
                return self._streamed(client, kwargs, received, context)
            return parse_message(client.messages.create(**kwargs))

        return guarded_call(
            call,
            context,
            self._http,
            received,
            sdk_errors=(anthropic.AnthropicError,),
            translate=lambda exc: translate_error(exc, self._api_key, self.base_url, self.connection),
            secret=self._api_key,
        )

    @staticmethod
    def _streamed(
        client: anthropic.Anthropic, kwargs: dict[str, Any], received: _Received, context: CallContext
    ) -> ModelResponse:
        messages: Any = client.messages  # kwargs built at run time: no overload applies
        events = messages.create(**kwargs, stream=True)
        try:
            for event in events:
                received.add(event, context)
                if received.stopped:
                    break
        finally:
            events.close()
        if not received.stopped:
            # The body ended before message_stop: cut by our abort, or by the server.
            if context.token.cancelled:
                raise received.interrupted()
            raise ProviderError("the stream ended before the answer was complete", retryable=bool(received.events))
        return received.response()


class _Received:
    """What a streamed answer has delivered so far: blocks of text and tool input, usage."""

    def __init__(self, messages: Sequence[dict[str, Any]]) -> None:
        self._messages = messages
        self.blocks: dict[int, dict[str, Any]] = {}
        self.prompt_tokens: int | None = None
        self.completion_tokens = 0
        self.final_usage = False  # message_delta's cumulative output count arrived
        self.stop_reason: str | None = None
        self.stopped = False
        self.events = 0
        self.model: str | None = None

    def add(self, event: Any, context: CallContext) -> None:
        self.events += 1
        kind = field(event, "type")
        if kind == "message_start":
            self.model = _model(field(field(event, "message"), "model"))
            usage = field(field(event, "message"), "usage")
            self.prompt_tokens = _prompt_tokens(usage)
            self.completion_tokens = bounded_tokens(field(usage, "output_tokens"))
        elif kind == "content_block_start":
            block = field(event, "content_block")
            self.blocks[self._index(event)] = {
                "type": field(block, "type"),
                "id": field(block, "id"),
                "name": field(block, "name"),
                "text": "",
                "json": "",
            }
        elif kind == "content_block_delta":
            block = self.blocks.setdefault(self._index(event), {"type": "text", "text": "", "json": ""})
            delta = field(event, "delta")
            if field(delta, "type") == "text_delta":
                piece = _string(field(delta, "text"))
                block["text"] += piece
                context.delta(piece)
            elif field(delta, "type") == "input_json_delta":
                block["json"] += _string(field(delta, "partial_json"))
        elif kind == "message_delta":
            usage = field(event, "usage")
            self.completion_tokens = bounded_tokens(field(usage, "output_tokens"))
            if field(usage, "input_tokens") is not None:
                self.prompt_tokens = _prompt_tokens(usage)
            self.final_usage = True
            stop = field(field(event, "delta"), "stop_reason")
            self.stop_reason = str(stop) if stop else self.stop_reason
        elif kind == "message_stop":
            self.stopped = True

    @staticmethod
    def _index(event: Any) -> int:
        index = field(event, "index")
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < 10_000:
            raise ProviderError("malformed response: a content block index is not a small integer")
        return index

    def text(self) -> str:
        return "".join(b["text"] for _, b in sorted(self.blocks.items()) if b["type"] == "text")

    def response(self) -> ModelResponse:
        """The whole answer once ``message_stop`` arrived; ``ProviderError`` for a broken one."""
        calls = [
            _tool_call(b["id"], b["name"], b["json"] or {}, i)
            for i, (_, b) in enumerate(sorted((k, b) for k, b in self.blocks.items() if b["type"] == "tool_use"))
        ]
        text = self.text()
        stop = self.stop_reason
        return ModelResponse(
            content=text if text or not calls else None,
            tool_calls=tuple(calls),
            usage=Usage(self.prompt_tokens or 0, self.completion_tokens),
            finish_reason=_FINISH.get(stop, stop) if stop else ("tool_calls" if calls else "stop"),
            model=self.model,
        )

    def interrupted(self) -> StepInterrupted:
        """The ``StepInterrupted`` for a call cut short: the text so far and its usage (estimated
        unless the server had already counted it)."""
        text = self.text()
        arrived = len(text) + sum(len(b["json"]) for b in self.blocks.values())
        estimate = estimate_usage(self._messages, arrived)
        exact = self.final_usage and self.prompt_tokens is not None
        usage = Usage(
            self.prompt_tokens if self.prompt_tokens is not None else estimate.prompt_tokens,
            self.completion_tokens if exact else max(self.completion_tokens, estimate.completion_tokens),
        )
        fragments = [
            {"index": i, "id": b["id"], "name": b["name"] or "", "arguments": b["json"]}
            for i, b in sorted(self.blocks.items())
            if b["type"] == "tool_use"
        ]
        partial = ModelResponse(content=text, usage=usage, finish_reason="interrupted")
        return StepInterrupted(partial=partial, usage_estimated=not exact, partial_tool_calls=fragments)
