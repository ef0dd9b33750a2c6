"""Every provider sends the ``max_tokens`` it reserves against the shared budgets, through its
vendor's real SDK, to the loopback server of its wire format (which records each request and, as
a real server does, stops an answer at the bound); the run's connection or provider gives the
bound from the settings (issue 44, item 3).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from nrllm_agents.catalog import registry
from nrllm_agents.domain.errors import ProviderError
from nrllm_agents.domain.steps import Usage
from nrllm_agents.testing.chat_server import ChatCompletionServer
from nrllm_agents.validation.run_request import RunRequest
from tests.integration.providers.test_native_providers import KEYS, provider_class, server_class

USER = [{"role": "user", "content": "hi"}]
TWENTY_K = {"content": "a long answer", "usage": {"prompt_tokens": 12, "completion_tokens": 20_000}}


def bound_sent(kind: str, body: dict[str, Any]) -> Any:
    """The answer's bound as the request carried it on the wire."""
    if kind == "openai":
        return body.get("max_tokens", body.get("max_completion_tokens"))
    if kind == "anthropic":
        return body.get("max_tokens")
    return (body.get("generationConfig") or {}).get("maxOutputTokens")


@pytest.fixture(params=["openai", "anthropic", "gemini"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(autouse=True)
def _no_ambient_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "GEMINI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    monkeypatch.delenv("GOOGLE_GEMINI_BASE_URL", raising=False)


def provider(kind: str, srv: ChatCompletionServer, **kwargs: Any) -> Any:
    return provider_class(kind)("test-model", base_url=srv.base_url, api_key=KEYS[kind], timeout=5.0, **kwargs)


@pytest.mark.parametrize("stream", [True, False])
def test_each_request_carries_the_bound_and_an_honest_answer_stops_there(kind: str, stream: bool) -> None:
    with server_class(kind)([TWENTY_K], api_key=KEYS[kind]) as srv:
        response = provider(kind, srv, stream=stream, max_tokens=700).complete(USER, [])
    assert bound_sent(kind, srv.requests[0]) == 700
    assert response.usage == Usage(12, 700) and response.finish_reason == "length"


def test_a_dishonest_server_reports_past_the_bound_and_the_provider_reports_it_all(kind: str) -> None:
    with server_class(kind)([TWENTY_K], api_key=KEYS[kind], honours_max_tokens=False) as srv:
        response = provider(kind, srv, max_tokens=700).complete(USER, [])
    assert bound_sent(kind, srv.requests[0]) == 700
    assert response.usage == Usage(12, 20_000)  # counted in full: the budget sees the excess


@pytest.mark.parametrize("kind", ["openai", "gemini"])
def test_without_a_bound_none_is_sent(kind: str) -> None:
    with server_class(kind)([{"content": "x"}], api_key=KEYS[kind]) as srv:
        provider(kind, srv).complete(USER, [])
    assert bound_sent(kind, srv.requests[0]) is None


def test_openai_s_own_api_gets_max_completion_tokens_and_other_servers_max_tokens() -> None:
    from nrllm_agents.domain.providers.openai_compat import OpenAIProvider

    assert OpenAIProvider("m", api_key="k").bound_field == "max_completion_tokens"
    assert OpenAIProvider("m", api_key="k", base_url="https://api.openai.com/v1").bound_field == "max_completion_tokens"
    assert OpenAIProvider("m", api_key="k", base_url="https://x.openai.azure.com/v1").bound_field == (
        "max_completion_tokens"
    )
    assert OpenAIProvider("m", api_key="k", base_url="http://localhost:11434/v1").bound_field == "max_tokens"
    with ChatCompletionServer([{"content": "x"}]) as srv:
        OpenAIProvider("m", base_url=srv.base_url, max_tokens=64).complete(USER, [])
    assert srv.requests[0]["max_tokens"] == 64 and "max_completion_tokens" not in srv.requests[0]


@pytest.mark.parametrize("stream", [True, False])
def test_a_server_that_refuses_the_field_sent_gets_the_other_once_and_from_then_on(stream: bool) -> None:
    from nrllm_agents.domain.providers.openai_compat import OpenAIProvider

    refusal = {
        "status": 400,
        "error": "Unsupported parameter: 'max_tokens' is not supported with this model. "
        "Use 'max_completion_tokens' instead.",
    }
    with ChatCompletionServer([refusal, {"content": "one"}, {"content": "two"}]) as srv:
        openai = OpenAIProvider("m", base_url=srv.base_url, max_tokens=64, stream=stream)
        assert openai.complete(USER, []).content == "one"
        assert openai.complete(USER, []).content == "two"
    sent = [("max_tokens" in body, body.get("max_completion_tokens")) for body in srv.requests]
    assert sent == [(True, None), (False, 64), (False, 64)]


def test_another_400_naming_the_field_is_not_retried() -> None:
    from nrllm_agents.domain.providers.openai_compat import OpenAIProvider

    too_many = {"status": 400, "error": "max_tokens is too large: 64. This model supports at most 16 tokens."}
    with ChatCompletionServer([too_many, {"content": "never"}]) as srv:
        with pytest.raises(ProviderError):
            OpenAIProvider("m", base_url=srv.base_url, max_tokens=64).complete(USER, [])
    assert len(srv.requests) == 1


@pytest.fixture
def settings_bounds(settings: Any) -> Iterator[None]:
    settings.NRLLM_AGENTS = {
        **getattr(settings, "NRLLM_AGENTS", {}),
        "BUDGET_MAX_TOKENS": 321,
        "ANTHROPIC_MAX_TOKENS": 654,
    }
    yield


@pytest.mark.django_db
def test_a_connection_of_each_kind_is_built_with_the_bound_it_reserves(kind: str, settings_bounds: None) -> None:
    from nrllm_agents.models import Connection

    Connection.objects.create(name=f"the-{kind}", kind=kind, base_url="http://127.0.0.1:9", default_model="m")
    request = RunRequest.from_mapping({"prompt": "p", "connection": f"the-{kind}"})
    built = registry.build_provider(request)
    expected = 654 if kind == "anthropic" else 321
    assert built.max_tokens == expected == registry.request_max_tokens(request)  # type: ignore[attr-defined]


@pytest.mark.django_db
def test_the_settings_providers_are_built_with_the_bound_they_reserve(kind: str, settings_bounds: None) -> None:
    request = RunRequest.from_mapping({"prompt": "p", "provider": kind, "model": "m"})
    built = getattr(registry, f"{kind}_provider")(request)
    assert built.max_tokens == (654 if kind == "anthropic" else 321) == registry.request_max_tokens(request)
