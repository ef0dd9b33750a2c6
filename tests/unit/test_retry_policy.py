"""One retry policy: the runtime (transient model failures) and the reaper (lost workers) ask it."""

from __future__ import annotations

import pytest
from django.test import override_settings

from nrllm_agents.store import InvalidArgument, settle
from nrllm_agents.store.retries import RetryPolicy


def test_the_budget_and_the_backoff():
    policy = RetryPolicy(max_attempts=3, base_seconds=2, max_seconds=5)
    assert [policy.may_retry(n) for n in range(5)] == [True, True, True, False, False]
    assert [policy.delay(n) for n in range(4)] == [2, 4, 5, 5]


def test_it_reads_the_settings():
    with override_settings(NRLLM_AGENTS={"MAX_ATTEMPTS": 0, "RETRY_BASE_SECONDS": 1, "RETRY_MAX_SECONDS": 9}):
        policy = RetryPolicy.from_settings()
    assert (policy.may_retry(0), policy.delay(3)) == (False, 8)


def test_a_settle_to_a_status_that_is_not_terminal_is_a_proper_error():
    """Once an ``assert``, which ``python -O`` removes: the store now refuses it in any mode."""
    with pytest.raises(InvalidArgument, match="completed or failed"):
        settle(None, status="running", reason="completed")  # refused before any query


def test_a_worker_waits_for_redis_forever_with_a_bounded_pause():
    """Issue 20 item 14: one policy object decides the reconnect too; it never gives up, its pause
    is capped, and a long outage (many tries) never overflows the float."""
    policy = RetryPolicy.reconnect()
    assert policy.may_retry(10**9)
    assert [policy.delay(n) for n in range(5)] == [0.5, 1, 2, 4, 4]
    assert policy.delay(100_000) == 4
