"""When a process traces: the standard variables, the opt-in to contents, and the check that
names a missing SDK."""

from __future__ import annotations

import sys

import pytest

from nrllm_agents.checks import check_tracing
from nrllm_agents.observability import tracing

OTEL = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_TRACES_EXPORTER",
    "OTEL_SDK_DISABLED",
)


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for name in (*OTEL, tracing.CAPTURE_CONTENT):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("variables", "asked"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "console,otlp"}, True),
    ],
)
def test_the_standard_variables_decide_whether_traces_are_exported(monkeypatch, variables, asked):
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert tracing.asked_by_environment() is asked


@pytest.mark.parametrize(
    ("value", "captured"),
    [
        (None, False),
        ("false", False),
        ("NO_CONTENT", False),
        ("EVENT_ONLY", False),
        ("true", True),
        ("SPAN_ONLY", True),
    ],
)
def test_message_contents_are_opt_in(monkeypatch, value, captured):
    if value is not None:
        monkeypatch.setenv(tracing.CAPTURE_CONTENT, value)
    assert tracing.capture_content() is captured


def test_a_missing_sdk_is_named_by_the_checks_when_the_variables_ask_for_traces(monkeypatch):
    assert check_tracing() == []
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert check_tracing() == []  # installed here (requirements-dev.txt)
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # as if it were not installed
    (warning,) = check_tracing()
    assert warning.id == "nrllm_agents.W012" and "opentelemetry.sdk.trace" in warning.msg
    assert tracing.configure() is False  # the process goes on untraced; nothing raised
