"""``GET /metrics`` for trees of runs (issue 36): the child runs that sub-agent calls start, and the
runs a cancel covers below the one cancelled, whether one run is cancelled or a selection.

``transaction=True``: the children run on executor threads with connections of their own.
"""

from __future__ import annotations

import pytest

from nrllm_agents.models import AgentRun, AgentRunEvent, CancelSource, RunStatus
from tests import waits
from tests.e2e.processes import wait_for
from tests.integration.executors.test_queue import no_redis  # noqa: F401  (fixture)
from tests.integration.runtime.test_trees import agent, calls, runs_of

from .test_metrics import delta, scrape, token_settings  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db(transaction=True)

CHILD_RUNS = "nrllm_child_runs_total"
CASCADED = "nrllm_cascaded_cancels_total"


def slow_tree(runtime, fan_out: int) -> str:
    """A root whose ``fan_out`` children are all streaming a slow answer (its id)."""
    agent("slow", [{"delay": 30, "content": "a slow answer"}])
    agent("boss", [calls("slow", fan_out), {"content": "never"}], ("slow",))
    root_id = runtime.enqueue({"agent": "boss", "prompt": "delegate"})
    wait_for(
        lambda: AgentRunEvent.objects.filter(run__tree_parent_id=root_id, kind="request").count() == fan_out,
        timeout=30,
        what="the children streaming",
    )
    return root_id


def test_the_child_runs_of_a_tree_are_counted(client, runtime, token_settings, no_redis):  # noqa: F811
    agent("leaf", [{"content": "leaf"}])
    agent("mid", [calls("leaf", 2), {"content": "mid"}], ("leaf",))
    agent("top", [calls("mid", 2), {"content": "top"}], ("mid",))
    before = scrape(client)
    root_id = runtime.enqueue({"agent": "top", "prompt": "plan"})
    assert waits.wait_local_idle(60)
    assert AgentRun.objects.get(pk=root_id).status == RunStatus.COMPLETED
    after = scrape(client)
    assert delta(after, before, CHILD_RUNS) == 6  # 2 mids, 2 leaves each
    assert delta(after, before, CASCADED) == 0


def test_a_cancel_counts_the_runs_below_it_once(client, runtime, token_settings, no_redis):  # noqa: F811
    root_id = slow_tree(runtime, 3)
    before = scrape(client)
    assert runtime.cancel(root_id, source=CancelSource.API, reason="enough").outcome == "cancelled"
    assert waits.wait_local_idle(60)
    assert {r.status for r in runs_of(root_id)} == {RunStatus.CANCELLED}
    runtime.cancel(root_id, source=CancelSource.API)  # a repeated cancel covers nothing
    after = scrape(client)
    assert delta(after, before, CASCADED) == 3


def test_a_bulk_cancel_counts_the_runs_below_the_selection(client, runtime, token_settings, no_redis):  # noqa: F811
    root_id = slow_tree(runtime, 2)
    before = scrape(client)
    result = runtime.cancel_many(AgentRun.objects.filter(pk=root_id), source=CancelSource.ADMIN)
    assert result.cascaded == 2
    assert waits.wait_local_idle(60)
    assert {r.status for r in runs_of(root_id)} == {RunStatus.CANCELLED}
    assert delta(scrape(client), before, CASCADED) == 2


def test_a_limit_s_stop_counts_the_runs_below_it(client, runtime, token_settings, no_redis):  # noqa: F811
    from nrllm_agents.models import TerminationReason
    from nrllm_agents.runtime import limits

    root_id = slow_tree(runtime, 2)
    before = scrape(client)
    verdict = (TerminationReason.DEADLINE_EXCEEDED, {"limit": "deadline_seconds", "value": 1}, "the deadline passed")
    assert limits.stop(root_id, verdict).applied
    assert waits.wait_local_idle(60)
    assert {r.termination_reason for r in runs_of(root_id)} == {TerminationReason.DEADLINE_EXCEEDED}
    assert delta(scrape(client), before, CASCADED) == 2
