"""One way to read a duration (issue 35): ``web/display.duration`` on the server, and the same
rule in ``console.js``; a tool's progress on one updating terminal line."""

from __future__ import annotations

import io

import pytest
from django.core.management.base import OutputWrapper
from django.core.management.color import no_style

from nrllm_agents.management.terminal import StreamPrinter
from nrllm_agents.presentation.describe import progress_text
from nrllm_agents.web.display import duration


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (None, ""),
        (0, "0 ms"),
        (340, "340 ms"),
        (2410, "2.41 s"),
        (59_990, "59.99 s"),
        (60_000, "1 min"),
        (125_000, "2 min 5 s"),
        (3_600_000, "1 h"),
        (3_900_000, "1 h 5 min"),
        (86_400_000, "24 h"),
    ],
)
def test_a_duration_reads_humanised(ms, text):
    assert duration(ms) == text


def test_progress_reads_as_a_fraction_with_its_message():
    assert progress_text([{"progress": 7, "total": 20.0, "message": "step 7"}]) == "7 / 20 step 7"
    assert progress_text([{"progress": 0.5, "total": None, "message": None}]) == "0.5"
    assert progress_text([]) == ""


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def report(value: int) -> dict:
    return {"run_id": "r", "kind": "progress", "round": 1, "call_id": "c", "name": "slow", "progress": value,
            "total": 3, "message": f"step {value}"}  # fmt: skip


def test_a_terminal_shows_progress_on_one_line_rewritten_by_each_report():
    out = Tty()
    printer = StreamPrinter(OutputWrapper(out), no_style(), as_json=False)
    printer.delta(report(1))
    printer.delta(report(2))
    text = out.getvalue()
    assert "slow: 1 / 3 step 1" in text
    assert text.count("\n") == 0 and "\r\033[K" in text  # one line, rewritten in place
    assert text.rsplit("\r\033[K", 1)[1].strip().endswith("slow: 2 / 3 step 2")


def test_json_output_prints_a_progress_line_per_report_and_a_pipe_prints_none():
    out = io.StringIO()
    StreamPrinter(OutputWrapper(out), no_style(), as_json=True).delta(report(1))
    assert '"event": "progress"' in out.getvalue() and '"kind"' not in out.getvalue()
    piped = io.StringIO()
    StreamPrinter(OutputWrapper(piped), no_style(), as_json=False).delta(report(1))
    assert piped.getvalue() == ""


def test_an_instant_reads_in_one_format_with_its_time_zone(settings):
    from datetime import UTC, datetime

    from django.utils import timezone

    from nrllm_agents.web.display import absolute

    settings.TIME_ZONE = "Europe/Paris"
    moment = datetime(2026, 12, 3, 13, 17, 49, 853000, tzinfo=UTC)
    with timezone.override("Europe/Paris"):
        assert absolute(moment) == "3 Dec 2026, 14:17:49 CET"
        assert absolute(moment.isoformat()) == "3 Dec 2026, 14:17:49 CET"
    assert absolute(None) == "" and absolute("garbage") == ""
