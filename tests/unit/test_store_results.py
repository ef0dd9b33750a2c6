"""What the store's fences return and refuse (``store.results``): pure values, no database."""

from __future__ import annotations

import pytest

from nrllm_agents.store import MAX_REASON_CHARS, NOT_FOUND, InvalidArgument, Lease, Transition, reason_problem
from nrllm_agents.store.results import checked_reason


def test_a_transition_is_found_when_it_names_a_status():
    assert Transition(False, "completed", "completed").found
    assert not NOT_FOUND.found and not NOT_FOUND.applied and NOT_FOUND.data == {}


def test_a_transition_is_frozen_and_its_data_is_not_shared():
    first, second = Transition(True, "running"), Transition(True, "running")
    first.data["x"] = 1
    assert second.data == {}
    with pytest.raises(AttributeError):
        first.applied = False  # type: ignore[misc]


@pytest.mark.parametrize("lease", list(Lease))
def test_a_lease_refuses_to_be_read_as_a_bool(lease):
    with pytest.raises(TypeError, match="compare it with Lease.HELD"):
        bool(lease)
    with pytest.raises(TypeError):
        if lease:
            pass


def test_a_reason_at_the_limit_is_recorded_one_longer_is_refused():
    assert reason_problem("x" * MAX_REASON_CHARS) is None
    assert reason_problem("x" * (MAX_REASON_CHARS + 1)) == (
        f"the reason is longer than {MAX_REASON_CHARS} characters ({MAX_REASON_CHARS + 1})"
    )


def test_a_reason_with_a_nul_character_is_refused():
    assert reason_problem("a\x00b") == "the reason contains a NUL character"


def test_checked_reason_records_none_as_empty_and_raises_the_problem():
    assert checked_reason(None) == "" and checked_reason("why") == "why"
    with pytest.raises(InvalidArgument, match="NUL") as caught:
        checked_reason("\x00")
    assert isinstance(caught.value, ValueError)  # surfaces that catch ValueError keep working
