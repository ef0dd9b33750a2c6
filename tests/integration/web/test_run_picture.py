"""A run's picture: the SVG Gantt strip and the spend summary, on the playground and admin pages."""

from __future__ import annotations

import re
from datetime import timedelta
from types import SimpleNamespace

import pytest

from nrllm_agents.models import AgentRun, CancelSource
from nrllm_agents.observability import gantt

pytestmark = pytest.mark.django_db

GATED = [
    {
        "tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 4},
    },
    {
        "tool_calls": [{"name": "write_note", "arguments": {"title": "t", "body": "b"}}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 6},
    },
    {"content": "noted"},
]


def long_script(rounds: int) -> list[dict]:
    turns = [
        {
            "tool_calls": [{"name": "calculator", "arguments": {"expression": f"{i}+1"}}],
            "usage": {"prompt_tokens": 10 + i, "completion_tokens": 2},
        }
        for i in range(rounds)
    ]
    return turns + [{"content": "done", "usage": {"prompt_tokens": 99, "completion_tokens": 1}}]


def test_cancelled_waiting_run_has_its_markers_after_the_last_step(runtime, alice):
    result = runtime.run({"prompt": "p", "tools": ["calculator", "write_note"], "script": GATED}, owner=alice)
    assert result.status == "waiting_for_approval"
    runtime.cancel(result.run_id, by=alice, source=CancelSource.PLAYGROUND)
    run = AgentRun.objects.get(pk=result.run_id)
    events = runtime.events(run.pk)
    picture = gantt.build(run, events)
    work = [b for b in picture.bars if b.kind in ("llm", "tool")]
    last_end = max(b.x + b.width for b in work)
    markers = {m.kind: m for m in picture.markers}
    assert markers["cancel"].x >= last_end - gantt.MIN_BAR and markers["stop"].x >= markers["cancel"].x
    assert [b.kind for b in picture.bars].count("tool") == 1 and [b.kind for b in picture.bars].count("llm") == 2
    approval = [b for b in picture.bars if b.kind == "approval"]
    assert len(approval) == 1 and "then cancelled" in approval[0].title  # the wait, up to the cancel
    assert picture.spend.total_tokens == 10 + 4 + 30 + 6
    assert [r["round"] for r in picture.spend.rounds] == [1, 2]


def test_long_run_stays_readable(runtime, alice):
    result = runtime.run(
        {"prompt": "long", "tools": ["calculator"], "script": long_script(45), "max_iterations": 60}, owner=alice
    )
    run = AgentRun.objects.get(pk=result.run_id)
    events = runtime.events(run.pk)
    assert len(events) > 100
    picture = gantt.build(run, events)
    work = [b for b in picture.bars if b.kind in ("llm", "tool")]
    assert len(work) == 46 + 45
    assert all(b.width >= gantt.MIN_BAR for b in work)
    assert all(picture.plot_left <= b.x and b.x + b.width <= picture.plot_right + 0.01 for b in work)
    # Bars of one lane never overlap: each is its own step, in order.
    for kind in ("llm", "tool"):
        lane = sorted((b for b in work if b.kind == kind), key=lambda b: b.sequence)
        assert all(a.x <= b.x for a, b in zip(lane, lane[1:]))
    assert len(picture.ticks) <= 12 and len(picture.spend.rounds) == 46


def test_pages_embed_the_svg_with_hover_titles(client, runtime, alice, django_user_model):
    result = runtime.run({"prompt": "p", "tools": ["calculator"], "script": long_script(2)}, owner=alice)
    client.force_login(alice)
    page = client.get(f"/playground/runs/{result.run_id}/").content.decode()
    assert '<svg class="gantt"' in page and "timeline.css" in page
    assert re.search(r'<rect class="bar bar-tool"[^>]*data-sequence="\d+"[^>]*><title>#\d+ tool calculator', page)
    assert 'id="spend-total">' in page and "http" not in page.split('<svg class="gantt"')[1].split("</svg>")[0].replace(
        "http://www.w3.org/2000/svg", ""
    )
    staff = django_user_model.objects.create_superuser("root", password="pw")
    client.force_login(staff)
    admin_page = client.get(f"/admin/nrllm_agents/agentrun/{result.run_id}/change/").content.decode()
    assert '<svg class="gantt"' in admin_page and "<title>#" in admin_page


def test_the_work_in_flight_follows_the_recorded_steps(runtime, alice):
    """``in_flight`` at every point of a real run's stream: the model before an answer, each
    call the answer asked for until its tool step, nothing after the final answer."""
    script = [
        {
            "tool_calls": [
                {"name": "calculator", "arguments": {"expression": "1+1"}},
                {"name": "sleep", "arguments": {"seconds": 0}},
            ]
        },
        {"content": "done"},
    ]
    result = runtime.run({"prompt": "p", "tools": ["calculator", "sleep"], "script": script}, owner=alice)
    run = AgentRun.objects.get(pk=result.run_id)
    events = list(runtime.events(run.pk))
    kinds = [e.kind for e in events]
    assert kinds == ["request", "llm", "tool", "tool", "request", "llm"]
    running = SimpleNamespace(  # the same run as it was while it ran (a plain value: gantt only reads it)
        status="running",
        started_at=run.started_at,
        created_at=run.created_at,
        finished_at=None,
        stopped_at=None,
        cancel_requested_at=None,
    )
    seen = []
    for n in range(len(events) + 1):
        now = gantt.in_flight(running, events[:n])
        seen.append(None if now is None else (now.kind, now.name))
    assert seen == [
        ("llm", ""),  # started, nothing recorded yet
        ("llm", ""),  # the request is recorded: the model is called
        ("tool", "calculator"),
        ("tool", "sleep"),
        ("llm", ""),
        ("llm", ""),
        None,  # the final answer: the run settles next
    ]
    assert gantt.in_flight(run, events) is None  # a completed run has nothing in flight
    picture = gantt.build(running, events[:3], now=events[2].created_at + timedelta(seconds=2))
    pending = [b for b in picture.bars if b.kind == "pending"]
    assert len(pending) == 1 and pending[0].title.startswith("tool sleep running for")
    assert ("tool sleep", pending[0].y - 3) in picture.lanes


def test_a_failed_tool_is_an_error_bar(runtime, alice):
    script = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "1/0"}}]}, {"content": "x"}]
    result = runtime.run({"prompt": "p", "tools": ["calculator"], "script": script}, owner=alice)
    run = AgentRun.objects.get(pk=result.run_id)
    bars = gantt.build(run, runtime.events(run.pk)).bars
    errors = [b for b in bars if b.kind == "error"]
    assert len(errors) == 1 and "error: division by zero" in errors[0].title
