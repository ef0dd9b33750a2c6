"""Built-in tools and script validation, fuzzed: bad input is a clear error, never a crash."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nrllm_agents.domain import ConfigurationError, ToolError
from nrllm_agents.domain.providers import DEMO_SCRIPT, ScriptedProvider, validate_script
from nrllm_agents.domain.tools import Calculator, CurrentTime, Sleep


@pytest.mark.parametrize(
    "expression, value",
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("-4 ** 2", -16),
        ("7 // 2", 3),
        ("7 % 4", 3),
        ("1 / 4", 0.25),
        ("2 ** 10", 1024),
        ("+5", 5),
        ("1.5 * 2", 3.0),
    ],
)
def test_calculator_values(expression, value):
    assert Calculator().execute({"expression": expression})["value"] == value


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os').system('true')",
        "open('/etc/passwd')",
        "x + 1",
        "[1, 2]",
        "lambda: 1",
        "1 if 1 else 2",
        "9 ** 9 ** 9",
        "10 ** 1000",
        "1 / 0",
        "'a' * 3",
        "True + 1",
        "",
        "   ",
        "1" * 500,
        "(-1) ** 0.5",
    ],
)
def test_calculator_refuses_with_a_tool_error(expression):
    with pytest.raises(ToolError):
        Calculator().execute({"expression": expression})


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_calculator_fuzz_only_tool_errors(text):
    try:
        out = Calculator().execute({"expression": text})
    except ToolError:
        return
    assert isinstance(out["value"], (int, float))


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
        lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
        max_leaves=12,
    )
)
def test_script_validation_fuzz(value):
    """Any JSON value either validates into a playable script or raises ConfigurationError."""
    try:
        script = validate_script(value)
    except ConfigurationError as exc:
        assert str(exc)
        return
    ScriptedProvider(script)


def test_script_validation_messages():
    with pytest.raises(ConfigurationError, match="not valid JSON"):
        validate_script("[{")
    with pytest.raises(ConfigurationError, match="exactly one of"):
        validate_script([{"content": "a", "tool_calls": [{"name": "x"}]}])
    with pytest.raises(ConfigurationError, match="delay"):
        validate_script([{"content": "a", "delay": -1}])
    with pytest.raises(ConfigurationError, match="unknown keys"):
        validate_script([{"content": "a", "colour": "red"}])
    assert validate_script(json.dumps(DEMO_SCRIPT)) == DEMO_SCRIPT


def test_sleep_is_bounded_and_validated():
    tool = Sleep(max_seconds=1)
    assert tool.execute({"seconds": 0}) == {"slept": 0}
    for bad in (-1, 2, "1", True, float("nan"), None):
        with pytest.raises(ToolError):
            tool.execute({"seconds": bad})


def test_current_time_zones():
    assert CurrentTime().execute({"timezone": "Europe/Paris"})["timezone"] == "Europe/Paris"
    assert CurrentTime().execute({})["timezone"] == "UTC"
    for bad in ("Mars/Olympus", "../../etc/passwd", 5):
        with pytest.raises(ToolError):
            CurrentTime().execute({"timezone": bad})


def test_scripted_turn_follows_the_transcript_not_the_instance():
    """A run resumed by another process (a new provider) continues where the transcript is."""
    script = [{"content": "first"}, {"content": "second"}]
    transcript = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "first"}]
    assert ScriptedProvider(script).complete(transcript, []).content == "second"


@pytest.mark.parametrize(
    "field, value",
    [
        ("prompt", "a\x00b"),
        ("system", "lone \ud800 surrogate"),
        ("model", "m\x00"),
        ("script", [{"content": "nul \x00 inside"}]),
        ("tools", ["calc\x00"]),
    ],
)
def test_run_requests_refuse_text_the_database_cannot_store(field, value, settings):
    from nrllm_agents.validation.run_request import UNSTORABLE, InvalidRequest, RunRequest

    with pytest.raises(InvalidRequest) as info:
        RunRequest.from_mapping({"prompt": "ok", field: value})
    assert info.value.errors[field] == UNSTORABLE
