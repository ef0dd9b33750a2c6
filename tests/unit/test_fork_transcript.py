"""Transcript checks shipped with the product: the scripted provider's ``expect``."""

from __future__ import annotations

import pytest

from nrllm_agents.domain import ConfigurationError, ProviderError
from nrllm_agents.domain.providers.scripted import ScriptedProvider


def test_scripted_expect_checks_the_transcript():
    provider = ScriptedProvider([{"content": "yes", "expect": [{"role": "user", "content": "hi"}]}])
    assert provider.complete([{"role": "user", "content": "hi"}], []).content == "yes"
    with pytest.raises(ProviderError, match="message 0"):
        provider.complete([{"role": "user", "content": "other"}], [])
    with pytest.raises(ProviderError, match="expected 1 messages, got 2"):
        provider.complete([{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}], [])
    with pytest.raises(ConfigurationError):
        ScriptedProvider([{"content": "x", "expect": {"role": "user"}}])
