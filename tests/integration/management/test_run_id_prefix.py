"""The commands take the short run id the UI shows (issue 35): a unique prefix of at least 8
hex digits names its run; one two runs share is exit 2 naming both; shorter is not an id."""

from __future__ import annotations

import uuid

import pytest

from nrllm_agents.models import AgentRun, RunStatus

from .test_commands import completed, queued, run


def twin(run_id: uuid.UUID) -> uuid.UUID:
    """A second run whose id shares the first 13 hex digits of ``run_id`` (and not the 14th)."""
    other, first = queued(), str(run_id)
    shared = uuid.UUID(first[:15] + ("0" if first[15] != "0" else "1") + str(other)[16:])
    AgentRun.objects.filter(pk=other).update(id=shared)  # no step refers to a queued run yet
    return shared


@pytest.mark.django_db
def test_agent_events_takes_the_8_character_prefix_the_ui_shows(runtime):
    run_id = completed(runtime)
    ran = run("agent_events", str(run_id)[:8], "--json")
    assert ran.code == 0, ran.err
    assert {line["step"]["run_id"] for line in ran.lines if line["event"] == "step"} == {str(run_id)}


@pytest.mark.django_db
def test_a_longer_prefix_with_its_hyphen_and_upper_case_works_too(runtime):
    run_id = completed(runtime)
    ran = run("agent_events", str(run_id)[:13].upper(), "--json")
    assert ran.code == 0, ran.err


@pytest.mark.django_db
def test_an_ambiguous_prefix_exits_2_listing_the_matches_and_changes_nothing(runtime):
    first = queued()
    second = twin(first)
    ran = run("agent_cancel", str(first)[:8])
    assert ran.code == 2 and ran.out == ""
    assert ran.err.startswith(f"run id prefix '{str(first)[:8]}' is ambiguous: ")
    assert str(first) in ran.err and str(second) in ran.err
    assert set(AgentRun.objects.values_list("status", flat=True)) == {RunStatus.QUEUED}
    # A longer prefix that tells them apart works.
    assert run("agent_events", str(first)[:16]).code == 0


@pytest.mark.django_db
def test_a_prefix_no_run_has_exits_1_and_a_short_one_is_not_an_id(runtime):
    run_id = completed(runtime)
    absent = "0" * 8 if not str(run_id).startswith("0" * 8) else "f" * 8
    ran = run("agent_events", absent)
    assert (ran.code, ran.err) == (1, f"no run id starts with {absent!r}")
    short = run("agent_events", str(run_id)[:7])
    assert (short.code, short.err) == (2, f"not a run id: {str(run_id)[:7]!r}")
