"""The one step describer: every kind reads as expected, and no payload can break it."""

from __future__ import annotations

import json

from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st

from nrllm_agents.presentation import describe

CALL = {"id": "c1", "name": "calculator", "arguments": {"z": 1, "expression": "6*7"}}


def test_llm_and_tool_steps_read_the_same_in_lines_and_headline():
    llm = {
        "content": None,
        "tool_calls": [CALL],
        "usage": {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6},
    }
    assert describe.lines("llm", llm) == [
        ("tool call", 'calculator({"expression": "6*7", "z": 1})'),  # sorted: jsonb keeps no order
        ("usage", "4 prompt + 2 completion = 6 tokens"),
    ]
    step = {"sequence": 1, "kind": "llm", "round": 1, "duration_ms": 12.4, "payload": llm}
    assert (
        describe.headline(step)
        == '  #1   llm       r1  asks for calculator({"expression": "6*7", "z": 1}) [4+2 tokens]  (12 ms)'
    )

    tool = {**CALL, "result": {"value": 42}, "error": None}
    assert describe.lines("tool", tool)[1] == ("result", '{"value": 42}')
    cut = {**CALL, "result": None, "error": None, "interrupted": True}
    assert describe.lines("tool", cut)[1] == ("interrupted", describe.INTERRUPTED_TOOL)
    assert describe.INTERRUPTED_TOOL in describe.headline({"kind": "tool", "payload": cut})


def test_a_failed_model_call_says_why_in_lines_and_headline():
    failed = {"content": None, "tool_calls": [], "usage": {"total_tokens": 0}, "failed": True}
    failed["error"] = "ProviderError: APIConnectionError: Connection error. (set OPENAI_BASE_URL: no server)"
    assert describe.lines("llm", failed) == [("error", failed["error"])]
    headline = describe.headline({"sequence": 1, "kind": "llm", "round": 1, "payload": failed})
    assert headline.startswith("  #1   llm       r1  FAILED: ProviderError: APIConnectionError")
    assert "OPENAI_BASE_URL" in headline


def test_a_cancel_says_who_where_and_at_which_step():
    base = {"source": "api", "by": "alice", "reason": "runaway", "requested_at": "2026-12-01T10:00:00+00:00"}
    at_boundary = describe.lines("cancelled", {**base, "boundary_sequence": 4})
    assert at_boundary[0] == ("cancelled", "by alice via api")
    assert at_boundary[-1] == ("stopped", "after step #4")
    in_flight = {**base, "boundary_sequence": 4, "interrupted": True, "interrupted_sequence": 5}
    assert describe.lines("cancelled", in_flight)[-1] == ("stopped", "interrupting step #5 in flight")
    nothing_ran = describe.lines("cancelled", {"source": "system", "boundary_sequence": None})
    assert nothing_ran[0] == ("cancelled", "by the system")
    assert nothing_ran[-1] == ("stopped", "before any step ran")
    headline = describe.headline({"sequence": 6, "kind": "cancelled", "round": 2, "payload": in_flight})
    assert "by alice via api, reason: runaway; stopped interrupting step #5 in flight" in headline
    cancel = {**base, "stopped_at": "2026-12-01T10:00:00.012+00:00", "limit": None}
    assert describe.cancel_text(cancel) == "Cancelled by alice via api at 10:00:00.000 UTC; stopped 12 ms later."
    assert ("requested at", "10:00:00.000 UTC") in at_boundary  # no raw ISO timestamp on a card
    with timezone.override("Europe/Paris"):  # TIME_ZONE's time, like every absolute time
        assert describe.clock("2026-12-01T10:00:00.012+00:00") == "11:00:00.012 CET"
        assert describe.clock("2026-07-01T10:00:00+00:00") == "12:00:00.000 CEST"


def test_values_are_clipped_saying_how_much_was_left_out():
    lines = describe.lines("llm", {"content": "x" * 5000}, limit=400)
    assert lines == [("content", "x" * 400 + "… (+4600 chars)")]
    assert len(describe.headline({"kind": "llm", "payload": {"content": "y " * 5000}})) < 200


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=25,
)
keys = st.sampled_from(
    [
        "content",
        "tool_calls",
        "usage",
        "messages",
        "tools",
        "calls",
        "repaired",
        "limit",
        "error",
        "result",
        "name",
        "arguments",
        "interrupted",
        "boundary_sequence",
        "by",
        "source",
        "reason",
        "approved",
        "provider",
        "message_count",
    ]
)


@settings(max_examples=400, deadline=None)
@given(
    kind=st.sampled_from(["request", "llm", "tool", "approval", "cancelled", "forked", "mystery"]),
    payload=st.dictionaries(keys, json_values, max_size=8) | json_values,
    sequence=st.integers() | st.none(),
)
def test_no_payload_shape_breaks_the_describer(kind, payload, sequence):
    lines = describe.lines(kind, payload, limit=50)
    assert all(isinstance(label, str) and isinstance(text, str) and len(text) <= 50 + 20 for label, text in lines)
    assert isinstance(describe.headline({"sequence": sequence, "kind": kind, "round": 1, "payload": payload}), str)
    json.dumps(lines)


def test_a_model_call_shows_its_cost_and_its_error():
    price = {"currency": "USD", "input_per_million": "1", "output_per_million": "2"}
    usage = {"total_tokens": 3, "cost": "0.00042"}
    priced = dict(describe.lines("llm", {"content": "hi", "usage": usage, "price": price}))
    assert priced["cost"] == "0.00042 USD at 1 in / 2 out per 1M tokens"
    cut_usage = {"cost": "0.0001", "cost_estimated": True}
    cut = dict(describe.lines("llm", {"content": "h", "usage": cut_usage, "price": price, "interrupted": True}))
    assert cut["cost"].endswith(", from estimated tokens")
    failed = dict(describe.lines("llm", {"error": "ProviderError: 502 from the provider"}))
    assert failed["error"] == "ProviderError: 502 from the provider"
    assert "cost" not in dict(describe.lines("llm", {"content": "free"}))


def test_an_approval_says_who_decided_and_why():
    decided = {"approved": False, "by": "carol", "reason": "not this week", "calls": [CALL]}
    assert describe.lines("approval", decided) == [
        ("decision", "denied by carol"),
        ("reason", "not this week"),
        ("call", 'calculator({"expression": "6*7", "z": 1})'),
    ]
    assert describe.lines("approval", {"approved": True})[0] == ("decision", "approved")
