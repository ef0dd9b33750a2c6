"""The anthropic and gemini providers, through each vendor's real SDK, against the loopback
servers that speak each wire format (no database, no Django).

Every test runs for both providers unless it checks one vendor's wire shape.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nrllm_agents.domain.cancel import CallContext, CancelToken, StepInterrupted
from nrllm_agents.domain.errors import ConfigurationError, ProviderError
from nrllm_agents.domain.loop import ToolLoop
from nrllm_agents.domain.providers import Provider
from nrllm_agents.domain.steps import LoopOutcome, ModelResponse, Step, StepKind, Usage
from nrllm_agents.domain.tools import Calculator
from nrllm_agents.domain.tools.base import schema
from nrllm_agents.testing.chat_server import ChatCompletionServer

USER = [{"role": "user", "content": "hi"}]
KINDS = ["anthropic", "gemini"]
# Keys shaped like each vendor's, and one shaped like nobody's: none may reach a message.
KEYS = {
    "openai": "sk-proj-S3CRET-" + "o" * 40,
    "anthropic": "sk-ant-api03-S3CRET-" + "a" * 40,
    "gemini": "AIzaSyS3CRET" + "g" * 27,
}
ODD_KEY = "hunter2-correct-horse-battery-staple-0042"
ENV = {
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL"),
}
SLOW = {
    "content": " ".join(f"word{i}" for i in range(300)),
    "chunk_delay": 0.02,
    "usage": {"prompt_tokens": 9, "completion_tokens": 300},
}


def server_class(kind: str) -> type[ChatCompletionServer]:
    if kind == "openai":
        return ChatCompletionServer
    if kind == "anthropic":
        from nrllm_agents.testing.anthropic_server import AnthropicServer

        return AnthropicServer
    from nrllm_agents.testing.gemini_server import GeminiServer

    return GeminiServer


def provider_class(kind: str) -> Callable[..., Any]:
    if kind == "openai":
        from nrllm_agents.domain.providers.openai_compat import OpenAIProvider

        return OpenAIProvider
    if kind == "anthropic":
        from nrllm_agents.domain.providers.anthropic_messages import AnthropicProvider

        return AnthropicProvider
    from nrllm_agents.domain.providers.gemini import GeminiProvider

    return GeminiProvider


@pytest.fixture(autouse=True)
def _no_ambient_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "GOOGLE_GEMINI_BASE_URL",
        "NRLLM_CALL_JOURNAL",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def server(kind: str) -> Iterator[ChatCompletionServer]:
    with server_class(kind)(api_key=KEYS[kind]) as srv:
        yield srv


def provider(kind: str, srv: ChatCompletionServer, **kwargs: Any) -> Any:
    kwargs.setdefault("api_key", KEYS[kind])
    kwargs.setdefault("timeout", 5.0)
    return provider_class(kind)("test-model", base_url=srv.base_url, **kwargs)


def assert_key_absent(error: BaseException, key: str) -> None:
    seen: BaseException | None = error
    while seen is not None:
        for text in (str(seen), repr(seen), repr(seen.args)):
            assert key not in text and key[-12:] not in text
        seen = seen.__cause__ or seen.__context__


def test_is_a_provider_and_needs_a_model(kind: str) -> None:
    assert isinstance(provider_class(kind)("m", api_key="k", base_url="http://127.0.0.1:9"), Provider)
    with pytest.raises(ConfigurationError):
        provider_class(kind)(" ")


@pytest.mark.parametrize("stream", [True, False])
def test_an_answer_streams_with_its_usage(kind: str, server: ChatCompletionServer, stream: bool) -> None:
    server.queue({"content": "hello there, friend", "usage": {"prompt_tokens": 11, "completion_tokens": 4}})
    deltas: list[str] = []
    response = provider(kind, server, stream=stream).complete(USER, [], context=CallContext(on_delta=deltas.append))
    assert response == ModelResponse("hello there, friend", (), Usage(11, 4), "stop")
    if stream:
        assert deltas == ["hello ", "there, ", "friend"]  # piece by piece, as the server sent them
    else:
        assert deltas == []


def test_the_sdks_own_variables_configure_it(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    key_variable, url_variable = ENV[kind]
    with server_class(kind)([{"content": "from the environment"}], api_key="env-key-0001") as srv:
        monkeypatch.setenv(key_variable, "env-key-0001")
        monkeypatch.setenv(url_variable, srv.base_url)
        assert provider_class(kind)("m").complete(USER, []).content == "from the environment"
    if kind == "gemini":  # either of the SDK's two names
        monkeypatch.delenv("GEMINI_API_KEY")
        with server_class(kind)([{"content": "google"}], api_key="env-key-0002") as srv:
            monkeypatch.setenv("GOOGLE_API_KEY", "env-key-0002")
            monkeypatch.setenv(url_variable, srv.base_url)
            assert provider_class(kind)("m").complete(USER, []).content == "google"


def test_a_gateway_token_works_for_claude_too(monkeypatch: pytest.MonkeyPatch) -> None:
    with server_class("anthropic")([{"content": "via the gateway"}], api_key="gateway-token-0001") as srv:
        monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "gateway-token-0001")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", srv.base_url)
        assert provider_class("anthropic")("m").complete(USER, []).content == "via the gateway"
    assert srv.request_headers[0]["authorization"] == "Bearer gateway-token-0001"


def test_a_calculator_call_round_trips_in_the_vendors_format(kind: str, server: ChatCompletionServer) -> None:
    """The model asks for the calculator; its result goes back in the vendor's own shape (the
    server refuses a transcript whose calls and results do not match, as the real APIs do)."""
    server.queue(
        {
            "tool_calls": [{"name": "calculator", "arguments": {"expression": "(17 + 25) * 3"}}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 5},
        },
        {"content": "It is 126.", "usage": {"prompt_tokens": 30, "completion_tokens": 6}},
    )
    steps: list[Step] = []
    result = ToolLoop(provider(kind, server), {"calculator": Calculator()}, trace=steps.append).start(
        "what is (17 + 25) * 3?", system="be brief"
    )
    assert result.outcome == LoopOutcome.COMPLETED, result.error
    assert result.final_text == "It is 126." and result.usage == Usage(50, 11)
    assert [s.kind for s in steps] == [StepKind.REQUEST, StepKind.LLM, StepKind.TOOL, StepKind.REQUEST, StepKind.LLM]
    call = steps[1].payload["tool_calls"][0]
    assert call["name"] == "calculator" and call["arguments"] == {"expression": "(17 + 25) * 3"}
    assert steps[2].payload["result"] == {"expression": "(17 + 25) * 3", "value": 126}
    first, second = server.requests
    if kind == "anthropic":
        assert first["system"] == "be brief"
        assert first["tools"][0]["name"] == "calculator"
        assert first["tools"][0]["input_schema"] == Calculator.parameters
        user, assistant, results = second["messages"]
        assert user == {"role": "user", "content": [{"type": "text", "text": "what is (17 + 25) * 3?"}]}
        [tool_use] = assistant["content"]
        assert tool_use == {
            "type": "tool_use",
            "id": call["id"],
            "name": "calculator",
            "input": {"expression": "(17 + 25) * 3"},
        }
        [tool_result] = results["content"]
        assert results["role"] == "user" and tool_result["type"] == "tool_result"
        assert tool_result["tool_use_id"] == call["id"]
        assert json.loads(tool_result["content"]) == {"expression": "(17 + 25) * 3", "value": 126}
    else:
        assert first["systemInstruction"]["parts"] == [{"text": "be brief"}]
        [declaration] = first["tools"][0]["functionDeclarations"]
        assert declaration["name"] == "calculator"
        # (the SDK writes this one field in the proto's own spelling, which Google's JSON parser takes too)
        schema_key = "parametersJsonSchema" if "parametersJsonSchema" in declaration else "parameters_json_schema"
        assert declaration[schema_key] == Calculator.parameters
        user, model, results = second["contents"]
        assert user == {"role": "user", "parts": [{"text": "what is (17 + 25) * 3?"}]}
        [function_call] = model["parts"]
        assert model["role"] == "model"
        assert base64.b64decode(function_call["thoughtSignature"]) == f"signed {call['id']}".encode()
        assert function_call["functionCall"]["name"] == "calculator"
        assert function_call["functionCall"]["args"] == {"expression": "(17 + 25) * 3"}
        [function_response] = results["parts"]
        assert results["role"] == "user"
        assert function_response["functionResponse"]["name"] == "calculator"
        assert function_response["functionResponse"]["response"] == {
            "output": {"expression": "(17 + 25) * 3", "value": 126}
        }


def test_several_calls_of_one_turn_are_answered_together(kind: str, server: ChatCompletionServer) -> None:
    server.queue(
        {
            "tool_calls": [
                {"name": "calculator", "arguments": {"expression": "1 + 1"}},
                {"name": "calculator", "arguments": {"expression": "oops("}},
            ]
        },
        {"content": "done"},
    )
    result = ToolLoop(provider(kind, server), {"calculator": Calculator()}, trace=lambda s: None).start("two")
    assert result.outcome == LoopOutcome.COMPLETED, result.error
    second = server.requests[1]
    last = (second.get("messages") or second.get("contents"))[-1]
    parts = last.get("content") if kind == "anthropic" else last.get("parts")
    assert len(parts) == 2  # both results in one message, as the API requires
    if kind == "anthropic":
        assert [p.get("is_error", False) for p in parts] == [False, True]
    else:
        assert "error" in parts[1]["functionResponse"]["response"]


@pytest.mark.parametrize("status", [500, 503, 429, 408])
def test_transient_statuses_are_retryable(kind: str, server: ChatCompletionServer, status: int) -> None:
    server.queue({"status": status, "error": "try again later"})
    with pytest.raises(ProviderError) as info:
        provider(kind, server).complete(USER, [])
    assert info.value.retryable is True and info.value.status_code == status
    assert f"(HTTP {status})" in str(info.value) and "try again later" in str(info.value)
    assert info.value.__cause__ is None and info.value.__context__ is None


@pytest.mark.parametrize("status", [400, 404])
def test_client_errors_are_not_retryable(kind: str, server: ChatCompletionServer, status: int) -> None:
    server.queue({"status": status, "error": "bad request"})
    with pytest.raises(ProviderError) as info:
        provider(kind, server).complete(USER, [])
    assert info.value.retryable is False and info.value.status_code == status


def test_a_wrong_key_names_the_error_class_the_status_and_the_variable(kind: str, server: ChatCompletionServer) -> None:
    wrong = {"anthropic": "sk-ant-wrong-" + "w" * 30, "gemini": "AIzaWrong" + "w" * 30}[kind]
    with pytest.raises(ProviderError) as info:
        provider(kind, server, api_key=wrong).complete(USER, [])
    message = str(info.value)
    expected = {"anthropic": "AuthenticationError (HTTP 401)", "gemini": "ClientError (HTTP 401)"}[kind]
    assert message.startswith(expected) and ENV[kind][0] in message
    assert info.value.retryable is False
    assert_key_absent(info.value, wrong)


@pytest.mark.parametrize("key", ["vendor", "odd"])
@pytest.mark.parametrize("kind", ["openai", *KINDS])  # all three providers share the description
def test_a_key_echoed_near_the_cut_never_leaks(kind: str, key: str) -> None:
    secret = KEYS[kind] if key == "vendor" else ODD_KEY
    with server_class(kind)(api_key=secret) as srv:
        for pad in (170, 185, 195):  # the key straddles the 200-character cut
            srv.queue({"status": 400, "error": "x" * pad + f" your key {secret} is not allowed"})
            with pytest.raises(ProviderError) as info:
                provider(kind, srv, api_key=secret).complete(USER, [])
            assert_key_absent(info.value, secret)
            assert secret[:8] not in str(info.value)


def test_no_server_points_at_the_base_url_variable(kind: str) -> None:
    with server_class(kind)() as srv:
        gone = srv.base_url
    with pytest.raises(ProviderError) as info:
        provider_class(kind)("m", api_key=KEYS[kind], base_url=gone, timeout=2.0).complete(USER, [])
    assert info.value.retryable is True and ENV[kind][1] in str(info.value)
    assert_key_absent(info.value, KEYS[kind])


def test_no_key_points_at_the_key_variable(kind: str) -> None:
    with server_class(kind)() as srv:
        with pytest.raises(ProviderError) as info:
            provider_class(kind)("m", base_url=srv.base_url).complete(USER, [])
    assert ENV[kind][0] in str(info.value) and info.value.retryable is False
    assert srv.requests == []  # nothing was sent without a key


def test_a_stream_cut_by_the_server_is_a_retryable_error(kind: str, server: ChatCompletionServer) -> None:
    frames = server.frames({"content": "never finished"}, {})
    server.queue({"raw": b"".join(data for data, _ in frames[:-2]).decode()})
    with pytest.raises(ProviderError) as info:
        provider(kind, server).complete(USER, [])
    assert "ended before" in str(info.value) and info.value.retryable is True


def test_an_overload_in_the_middle_of_a_claude_stream_is_retryable() -> None:
    from nrllm_agents.testing.anthropic_server import AnthropicServer

    with AnthropicServer(api_key=KEYS["anthropic"]) as srv:
        frames = [data.decode() for data, _ in srv.frames({"content": "half an answer"}, {})][:4]
        error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        srv.queue({"raw": "".join(frames) + f"event: error\ndata: {json.dumps(error)}\n\n"})
        with pytest.raises(ProviderError) as info:
            provider("anthropic", srv).complete(USER, [])
    assert info.value.retryable is True and "Overloaded" in str(info.value) and "HTTP 200" not in str(info.value)


def test_a_prompt_gemini_blocks_is_not_retried() -> None:
    from nrllm_agents.testing.gemini_server import GeminiServer

    blocked = {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 4}}
    with GeminiServer(api_key=KEYS["gemini"]) as srv:
        for stream in (True, False):
            srv.queue({"raw": f"data: {json.dumps(blocked)}\r\n\r\n" if stream else json.dumps(blocked)})
            with pytest.raises(ProviderError) as info:
                provider("gemini", srv, stream=stream).complete(USER, [])
            assert info.value.retryable is False and "SAFETY" in str(info.value)


def test_a_cancel_closes_the_connection_and_keeps_the_partial_answer(kind: str, server: ChatCompletionServer) -> None:
    server.queue(SLOW)
    token = CancelToken()
    deltas: list[str] = []

    def on_delta(text: str) -> None:
        deltas.append(text)
        if len(deltas) == 5:
            threading.Thread(target=token.cancel).start()  # another thread, as the listener does

    with pytest.raises(StepInterrupted) as info:
        provider(kind, server).complete(USER, [], context=CallContext(token=token, on_delta=on_delta))
    assert server.disconnected.wait(2), "the server never saw the client go away"
    log = server.streams[0]
    assert not log.finished and log.disconnected_at is not None
    partial = info.value.partial
    assert partial is not None and partial.finish_reason == "interrupted"
    assert partial.content and SLOW["content"].startswith(partial.content)
    assert partial.content.startswith("".join(deltas[:5]))
    assert info.value.usage_estimated is True and partial.usage.completion_tokens > 0
    if kind == "anthropic":  # message_start counted the input exactly
        assert partial.usage.prompt_tokens == 9


def test_a_cancel_aborts_a_call_that_does_not_stream(kind: str, server: ChatCompletionServer) -> None:
    server.queue({"content": "too late", "delay": 5})
    token = CancelToken()
    model = provider(kind, server, stream=False)
    threading.Timer(0.3, token.cancel).start()
    started = time.monotonic()
    with pytest.raises(StepInterrupted) as info:
        model.complete(USER, [], context=CallContext(token=token))
    assert time.monotonic() - started < 2.0, "the call ran on after the cancel"
    assert info.value.partial is not None and info.value.partial.content == ""


@pytest.mark.parametrize("kind", ["openai", *KINDS])
def test_a_cancel_before_the_connection_opens_still_cuts_it(kind: str) -> None:
    """The token trips after the call began but before its socket connected: the socket is
    shut down as it opens, so the call cannot run on unaborted."""
    with server_class(kind)([{"content": "never", "delay": 5}]) as srv:
        token = CancelToken()
        model = provider(kind, srv, stream=False)
        model._http.arm()
        model._http.abort()  # as the cancel's callback would, between arm() and the connect
        started = time.monotonic()
        original_arm, model._http.arm = model._http.arm, lambda: None  # keep the abort in force
        with pytest.raises((StepInterrupted, ProviderError)):
            model.complete(USER, [], context=CallContext(token=token))
        model._http.arm = original_arm
        assert time.monotonic() - started < 2.0


# --- hostile servers ----------------------------------------------------------------------------
HOSTILE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.just("\x00\ud800"),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)
ENTRIES = [
    {"content": "a b c", "usage": {"prompt_tokens": 3, "completion_tokens": 3}},
    {"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}], "usage": {"prompt_tokens": 1}},
]


def _mutate(value: Any, data: st.DataObject) -> Any:
    """``value`` with one field somewhere inside replaced by a hostile value."""
    if isinstance(value, dict) and value and data.draw(st.booleans()):
        key = data.draw(st.sampled_from(sorted(value)))
        return {**value, key: _mutate(value[key], data)}
    if isinstance(value, list) and value and data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(value) - 1))
        return [*value[:i], _mutate(value[i], data), *value[i + 1 :]]
    return data.draw(HOSTILE)


def _renumber(value: Any, n: Any) -> Any:
    """``value`` with every integer inside replaced by ``n`` (token counts, indexes...)."""
    if isinstance(value, dict):
        return {k: _renumber(v, n) for k, v in value.items()}
    if isinstance(value, list):
        return [_renumber(v, n) for v in value]
    return n if isinstance(value, int) and not isinstance(value, bool) else value


HUGE = st.sampled_from([3_000_000_000, -1, 2**63, 10**30, 1.5, float("inf")])


def _hostile_body(kind: str, stream: bool, data: st.DataObject) -> str:
    srv = server_class(kind)()  # a fresh one, never started: the same ids every example
    entry = data.draw(st.sampled_from(ENTRIES))
    how = data.draw(st.sampled_from(["mutate", "garbage", "truncate", "numbers"]))
    if not stream:
        body: Any = srv.answer(entry, {"model": "m"})
        if how == "garbage":
            return data.draw(st.sampled_from(["{not json", "[]", "null", '"text"', "1e999999", "{}"]))
        text = json.dumps(_renumber(body, data.draw(HUGE)) if how == "numbers" else _mutate(body, data))
        return text[: data.draw(st.integers(0, len(text)))] if how == "truncate" else text
    frames = [raw.decode() for raw, _ in srv.frames(entry, {"model": "m", "stream_options": {"include_usage": True}})]
    i = data.draw(st.integers(0, len(frames) - 1))
    if how == "numbers":
        n = data.draw(HUGE)
        return "".join(re.sub(r"(?<![\w.])\d+(?![\w.])", lambda _: json.dumps(n), f) for f in frames)
    if how == "garbage":
        frames[i] = "data: " + data.draw(st.sampled_from(["{oops", "[1,2]", "null", "\x00", "9" * 5000])) + "\n\n"
    elif how == "truncate":
        whole = "".join(frames)
        return whole[: data.draw(st.integers(0, len(whole)))]
    else:
        head, _, payload = frames[i].partition("data: ")
        payload, _, tail = payload.partition("\n")
        try:
            value = json.loads(payload.strip())
        except ValueError:  # an end marker ("[DONE]")
            value = payload.strip()
        frames[i] = f"{head}data: {json.dumps(_mutate(value, data))}\n{tail}"
    return "".join(frames)


HOSTILE_SERVERS: dict[str, ChatCompletionServer] = {}


@pytest.fixture(scope="module", autouse=True)
def _hostile_servers() -> Iterator[None]:
    """One server per wire format for every fuzz example (hypothesis runs many in one test)."""
    for name in ("openai", *KINDS):
        HOSTILE_SERVERS[name] = server_class(name)(api_key=KEYS[name]).start()
    yield
    for srv in HOSTILE_SERVERS.values():
        srv.stop()


@pytest.mark.parametrize("kind", ["openai", *KINDS])
@pytest.mark.parametrize("stream", [True, False])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hostile_server_output_is_a_provider_error_never_a_crash(kind: str, stream: bool, data: st.DataObject) -> None:
    server = HOSTILE_SERVERS[kind]
    server.queue({"raw": _hostile_body(kind, stream, data)})
    try:
        response = provider(kind, server, stream=stream, timeout=2.0).complete(USER, [schema(Calculator())])
    except ProviderError as exc:
        assert exc.__cause__ is None and exc.__context__ is None
        return
    assert isinstance(response, ModelResponse)
    assert all(0 <= n <= 100_000_000 for n in (response.usage.prompt_tokens, response.usage.completion_tokens))
    assert response.content is None or isinstance(response.content, str)
    assert all(isinstance(c.arguments, dict) and isinstance(c.name, str) for c in response.tool_calls)


# --- the shared description -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "leak",
    [
        "sk-proj-abcdEFGH1234",
        "sk-ant-api03-abcd_EFGH-1234",
        "sk-abc***xyz9",  # masked by the server, still a key's shape
        "AIzaSyA-abcdefghijklmnop",
        "Bearer eyJhbGciOi.J9.abc",
        "x-api-key: abcdef123456",
        "x-goog-api-key=abcdef123456",
        '"api_key": "abcdef123456"',
        "https://host/v1beta/models/m:generateContent?key=abcdef123456&alt=sse",
    ],
)
def test_every_vendors_key_shape_is_scrubbed(leak: str) -> None:
    from nrllm_agents.domain.providers.failures import describe_failure

    secret_part = leak.replace("***", "").split()[-1].strip('"').split("key=")[-1].split("&")[0][-6:]
    message = describe_failure("APIError", 400, f"rejected {leak} here", None)
    assert (
        secret_part not in message and "[redacted]" in message and message.startswith("APIError (HTTP 400): rejected")
    )


def test_the_cut_comes_after_the_scrub_and_a_masked_piece_of_the_key_goes_too() -> None:
    from nrllm_agents.domain.providers.failures import MAX_DESCRIPTION_CHARS, describe_failure

    for pad in range(MAX_DESCRIPTION_CHARS - len(ODD_KEY), MAX_DESCRIPTION_CHARS + 1):
        message = describe_failure("E", None, "x" * pad + ODD_KEY + " tail", ODD_KEY)
        assert not any(ODD_KEY[i : i + 8] in message for i in range(len(ODD_KEY) - 7))
    masked = f"key {ODD_KEY[:10]}...{ODD_KEY[-4:]} refused"  # the server shows the key's ends
    assert ODD_KEY[:10] not in describe_failure("E", 401, masked, ODD_KEY)


# --- the transcript in each vendor's shape (pure) ---------------------------------------------------
TRANSCRIPT = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "add"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "add", "arguments": {"a": 1}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "1"},
    {"role": "user", "content": "and now?"},  # follows the result: the same user message
    {"role": "assistant", "content": None},  # neither text nor calls: left out
    {"role": "assistant", "content": "done"},
]


def test_the_transcript_in_anthropics_shape() -> None:
    from nrllm_agents.domain.providers.anthropic_messages import to_anthropic

    snapshot = json.dumps(TRANSCRIPT)
    system, wire = to_anthropic(TRANSCRIPT)
    assert json.dumps(TRANSCRIPT) == snapshot  # input untouched
    assert system == "be brief"
    assert wire == [
        {"role": "user", "content": [{"type": "text", "text": "add"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "add", "input": {"a": 1}}]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": "1"},
                {"type": "text", "text": "and now?"},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
    ]


def test_the_transcript_in_geminis_shape() -> None:
    from nrllm_agents.domain.providers.gemini import UNSIGNED, to_gemini

    system, contents = to_gemini(TRANSCRIPT, {})
    assert system == "be brief"
    call = {"function_call": {"id": "c1", "name": "add", "args": {"a": 1}}, "thought_signature": UNSIGNED}
    assert contents == [
        {"role": "user", "parts": [{"text": "add"}]},
        {"role": "model", "parts": [call]},
        {
            "role": "user",
            "parts": [
                {"function_response": {"id": "c1", "name": "add", "response": {"output": 1}}},
                {"text": "and now?"},
            ],
        },
        {"role": "model", "parts": [{"text": "done"}]},
    ]
    _, signed = to_gemini(TRANSCRIPT, {"c1": b"sig"})  # a signature the model gave is sent back
    assert signed[1]["parts"][0]["thought_signature"] == b"sig"
