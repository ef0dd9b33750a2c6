"""A provider for the Gemini API, on the official ``google-genai`` SDK.

Our system messages become the ``system_instruction``; an assistant turn becomes a ``model`` turn
whose tool calls are ``functionCall`` parts; our ``tool`` messages become ``functionResponse``
parts (the result under ``output``, a failure under ``error``), one turn's results gathered in one
``user`` turn as the API requires. Calls stream by default (``streamGenerateContent``); a cancel
shuts the connection down at once (``abortable.py``) and what arrived is kept. Every failure
becomes a ``ProviderError`` named by the SDK's error class and HTTP status, scrubbed of the key.

Gemini 3 models sign their function calls (``thought_signature``) and want the signature back:
the provider keeps those it received for the run, and sends Google's documented placeholder for a
call it did not see (a resumed or forked run). Configuration follows the SDK: ``GEMINI_API_KEY`` or
``GOOGLE_API_KEY``, and ``GOOGLE_GEMINI_BASE_URL``, unless given.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import httpx2
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from ..cancel import CallContext, StepInterrupted
from ..errors import ConfigurationError, ProviderError
from ..steps import ModelResponse, ToolCall, Usage
from .abortable import AbortableHttp
from .failures import bounded_tokens, guarded_call, sdk_failure
from .wire import call_arguments, call_name, declarations, estimate_usage, field, parse_arguments, text_of

VARIABLES = ("GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL")
# Google's documented stand-in for a signature the caller does not have (history from elsewhere).
UNSIGNED = b"skip_thought_signature_validator"
_FINISH = {"STOP": "stop", "MAX_TOKENS": "length"}


def _result(content: Any) -> dict[str, Any]:
    """A tool message's content as a ``functionResponse.response`` object."""
    text = text_of(content)
    if text.startswith("error: "):
        return {"error": text[len("error: ") :]}
    try:
        return {"output": json.loads(text)}
    except ValueError:
        return {"output": text}


def to_gemini(
    messages: Sequence[dict[str, Any]], signatures: dict[str, bytes] | None = None
) -> tuple[str | None, list[dict[str, Any]]]:
    """Our transcript as ``(system_instruction, contents)`` for ``generateContent``.

    Tool results and a user's text that follow one another share one ``user`` turn; a model
    turn with neither text nor calls is left out (the API refuses empty parts).
    """
    signatures = signatures or {}
    system: list[str] = []
    contents: list[dict[str, Any]] = []
    names: dict[str, str] = {}

    def user_parts() -> list[dict[str, Any]]:
        if contents and contents[-1]["role"] == "user":
            return contents[-1]["parts"]  # type: ignore[no-any-return]
        contents.append({"role": "user", "parts": []})
        return contents[-1]["parts"]  # type: ignore[no-any-return]

    for message in messages:
        role, content = message.get("role"), message.get("content")
        if role == "system":
            system.append(text_of(content))
        elif role == "tool":
            call_id = str(message.get("tool_call_id"))
            response = {"id": call_id, "name": names.get(call_id, "unknown"), "response": _result(content)}
            user_parts().append({"function_response": response})
        elif role == "assistant":
            parts: list[dict[str, Any]] = []
            if text_of(content):
                parts.append({"text": text_of(content)})
            for i, call in enumerate(message.get("tool_calls") or ()):
                call_id, name = str(call.get("id")), call_name(call)
                names[call_id] = name
                part: dict[str, Any] = {"function_call": {"id": call_id, "name": name, "args": call_arguments(call)}}
                if i == 0:  # the API signs (and checks) the first call of a turn
                    part["thought_signature"] = signatures.get(call_id, UNSIGNED)
                parts.append(part)
            if parts:
                contents.append({"role": "model", "parts": parts})
        elif text_of(content):
            user_parts().append({"text": text_of(content)})
    return ("\n\n".join(s for s in system if s) or None), contents


def to_gemini_tools(tools: Sequence[dict[str, Any]]) -> list[Any]:
    functions = [
        types.FunctionDeclaration(name=name, description=description, parameters_json_schema=parameters)
        for name, description, parameters in declarations(tools)
    ]
    return [types.Tool(function_declarations=functions)] if functions else []


def _usage(metadata: Any) -> Usage:
    """Prompt tokens (tool-use prompts included) and output tokens (thinking included)."""
    return Usage(
        bounded_tokens(field(metadata, "prompt_token_count"))
        + bounded_tokens(field(metadata, "tool_use_prompt_token_count")),
        bounded_tokens(field(metadata, "candidates_token_count"))
        + bounded_tokens(field(metadata, "thoughts_token_count")),
    )


def translate_error(
    exc: Exception, api_key: str | None, base_url: str | None, connection: str | None = None
) -> ProviderError:
    """A safe ``ProviderError`` for an SDK failure (an ``APIError``, or the transport's own)."""
    if isinstance(exc, genai_errors.APIError):
        code = field(exc, "code")
        return sdk_failure(
            type(exc).__name__,
            field(exc, "message") or field(exc, "status") or "no description",
            api_key,
            status=code if isinstance(code, int) and 100 <= code <= 599 else None,
            variables=VARIABLES,
            base_url=base_url,
            connection=connection,
        )
    return sdk_failure(
        type(exc).__name__,
        str(exc),
        api_key,
        unreachable=isinstance(exc, httpx2.TransportError),
        timed_out=isinstance(exc, httpx2.TimeoutException),
        variables=VARIABLES,
        base_url=base_url,
        connection=connection,
    )


class GeminiProvider:
    """Answers chat turns through the Gemini API's ``generateContent``.

    Parameters
    ----------
    model: the model name sent with each request; required.
    api_key: defaults to the SDK's ``GEMINI_API_KEY`` or ``GOOGLE_API_KEY``.
    base_url: the API root; defaults to the SDK's ``GOOGLE_GEMINI_BASE_URL``, then Google's.
    timeout: seconds per request. The SDK never retries; retrying is the runtime's decision.
    stream: stream the answer (the default); a cancel then keeps what had arrived.
    connection: the connection's name, when it is built from one: its failures name it, never its URL.
    max_tokens: the most answer tokens a call may produce (``generation_config.max_output_tokens``,
        what a call reserves against the shared budgets); ``None`` sends no bound.
    """

    name = "gemini"

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        stream: bool = True,
        connection: str | None = None,
        max_tokens: int | None = None,
    ) -> None:
        if not model or not isinstance(model, str) or not model.strip():
            raise ConfigurationError("the gemini provider needs a model name")
        self.model = model.strip()
        self.base_url = base_url or os.environ.get("GOOGLE_GEMINI_BASE_URL") or None
        self._api_key = api_key or os.environ.get("GOOGLE_API_KEY") or os.environ.get("GEMINI_API_KEY") or None
        self.timeout = timeout
        self.stream = stream
        self.connection = connection  # the connection's name: failures name it, never its URL
        self.max_tokens = max_tokens
        self._signatures: dict[str, bytes] = {}
        self._http = AbortableHttp(httpx2.Client, timeout=timeout)
        options = types.HttpOptions(base_url=self.base_url, timeout=int(timeout * 1000), httpx_client=self._http.client)
        self._client = (
            genai.Client(api_key=self._api_key, vertexai=False, http_options=options) if self._api_key else None
        )

    def __repr__(self) -> str:
        return f"GeminiProvider(model={self.model!r}, base_url={self.base_url!r})"

    def complete(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]], context: CallContext | None = None
    ) -> ModelResponse:
        """One model call; raises ``ProviderError`` (never an SDK exception) on failure.

        Raises ``StepInterrupted`` (with the text received so far) when the context's token
        trips during the call.
        """
        context = context or CallContext()
        client = self._client
        if client is None:
            raise ProviderError("no API key for the gemini provider: set GEMINI_API_KEY (or GOOGLE_API_KEY)")
        system, contents = to_gemini(messages, self._signatures)
        config = types.GenerateContentConfig(
            system_instruction=system,
            tools=to_gemini_tools(tools) or None,
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
            max_output_tokens=self.max_tokens,
        )
        kwargs: dict[str, Any] = {"model": self.model, "contents": contents, "config": config}
        received = _Received(messages, self._signatures)

        def call() -> ModelResponse:
            if self.stream:
                chunks: Any = client.models.generate_content_stream(**kwargs)  # a generator: close() ends it
                try:
                    for chunk in chunks:
                        received.add(chunk, context)
                finally:
                    chunks.close()
                if received.finish_reason is None:  # the body ended before the answer did
                    if context.token.cancelled:
                        raise received.interrupted()
                    raise ProviderError(
                        "the stream ended before the answer was complete", retryable=bool(received.chunks)
                    )
            else:
                received.add(client.models.generate_content(**kwargs), context, publish=False)
                if received.finish_reason is None:
                    raise ProviderError("malformed response: the answer has no finishReason")
            return received.response()

        return guarded_call(
            call,
            context,
            self._http,
            received,
            sdk_errors=(genai_errors.APIError, httpx2.HTTPError),
            translate=lambda exc: translate_error(exc, self._api_key, self.base_url, self.connection),
            secret=self._api_key,
        )


class _Received:
    """What an answer has delivered so far: text, function calls, usage, the finish reason."""

    def __init__(self, messages: Sequence[dict[str, Any]], signatures: dict[str, bytes]) -> None:
        self._messages = messages
        self._signatures = signatures
        self.text: list[str] = []
        self.calls: list[ToolCall] = []
        self.usage: Usage | None = None
        self.finish_reason: str | None = None
        self.chunks = 0
        self.model: str | None = None

    def add(self, chunk: Any, context: CallContext, *, publish: bool = True) -> None:
        self.chunks += 1
        version = field(chunk, "model_version")
        self.model = self.model or (version if isinstance(version, str) and version else None)
        metadata = field(chunk, "usage_metadata")
        if metadata is not None:
            self.usage = _usage(metadata)
        blocked = field(field(chunk, "prompt_feedback"), "block_reason")
        if blocked is not None:  # refused before any answer: asking again gives the same
            reason = str(getattr(blocked, "value", blocked))[:40]
            raise ProviderError(f"the model refused the prompt (blockReason {reason})", retryable=False)
        candidates = field(chunk, "candidates")
        if candidates is None:
            return
        if not isinstance(candidates, list):
            raise ProviderError("malformed response: 'candidates' is not a list")
        if not candidates:
            return
        candidate = candidates[0]
        for part in field(field(candidate, "content"), "parts") or ():
            self._part(part, context, publish)
        finish = field(candidate, "finish_reason")
        if finish is not None:
            name = str(getattr(finish, "value", finish))
            self.finish_reason = _FINISH.get(name, name.lower())

    def _part(self, part: Any, context: CallContext, publish: bool) -> None:
        if field(part, "thought"):
            return  # the model's thinking is not its answer
        function_call = field(part, "function_call")
        if function_call is not None:
            name = field(function_call, "name")
            if not isinstance(name, str) or not name:
                raise ProviderError("malformed response: a functionCall has no name")
            call_id = str(field(function_call, "id") or f"call_{len(self.calls) + 1}")
            signature = field(part, "thought_signature")
            if isinstance(signature, bytes):
                self._signatures[call_id] = signature
            self.calls.append(ToolCall(id=call_id, name=name, arguments=parse_arguments(field(function_call, "args"))))
            return
        text = field(part, "text")
        if text is None:
            return
        if not isinstance(text, str):
            raise ProviderError("malformed response: a text part is not a string")
        if text:
            self.text.append(text)
            if publish:
                context.delta(text)

    def response(self) -> ModelResponse:
        text = "".join(self.text)
        finish = self.finish_reason or "stop"
        if self.calls and finish == "stop":
            finish = "tool_calls"
        return ModelResponse(
            content=text if text or not self.calls else None,
            tool_calls=tuple(self.calls),
            usage=self.usage or Usage(),
            finish_reason=finish,
            model=self.model,
        )

    def interrupted(self) -> StepInterrupted:
        """The ``StepInterrupted`` for a call cut short: the text so far, its usage estimated."""
        text = "".join(self.text)
        estimate = estimate_usage(self._messages, len(text))
        partial = ModelResponse(content=text, usage=estimate, finish_reason="interrupted")
        fragments = [{"index": i, **c.as_dict()} for i, c in enumerate(self.calls)]
        return StepInterrupted(partial=partial, usage_estimated=True, partial_tool_calls=fragments)
