"""The thread executor and the token's hand-back, with real threads (no database)."""

from __future__ import annotations

import threading

import pytest

from nrllm_agents.domain.cancel import NEVER, CancelToken
from nrllm_agents.executors.pool import SegmentExecutor


def test_hand_back_ends_a_wait_and_is_told_apart_from_a_cancel():
    token = CancelToken()
    woke = []
    waiter = threading.Thread(target=lambda: woke.append(token.wait(30)))
    waiter.start()
    assert token.hand_back() is True
    waiter.join(5)
    assert woke == [True] and token.cancelled and token.handing_back
    assert token.cancel() is False  # tripped once: a later cancel is seen at the boundary instead
    assert token.handing_back


def test_a_cancel_is_not_a_hand_back_and_wins_when_first():
    token = CancelToken()
    assert token.cancel() is True
    assert token.hand_back() is False and not token.handing_back


def test_a_shield_defers_the_hand_back_but_not_a_cancel():
    token = CancelToken()
    token.shield(True)
    assert token.hand_back() is False and not token.cancelled and not token.handing_back
    assert token.cancel() is True and not token.handing_back
    other = CancelToken()
    other.shield(True)
    other.shield(False)
    assert other.hand_back() is True


def test_the_never_token_cannot_be_handed_back():
    assert NEVER.hand_back() is False and not NEVER.cancelled


def test_executor_runs_at_most_concurrency_at_once_and_the_rest_in_order():
    executor = SegmentExecutor(3, name="test-exec")
    release = threading.Event()
    lock = threading.Lock()
    running, peak, done = [0], [0], []

    def job(n: int) -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        release.wait(10)
        with lock:
            running[0] -= 1
            done.append(n)

    for n in range(10):
        executor.submit(job, n)
    assert executor.in_flight == 10 and executor.free_slots() == 0
    assert executor.wait_for_slot(0.05) is False
    release.set()
    assert executor.wait_idle(10)
    assert peak[0] == 3 and sorted(done) == list(range(10))
    assert executor.wait_for_slot(0) is True and executor.free_slots() == 3


def test_a_failing_callable_neither_kills_its_thread_s_backlog_nor_leaks_a_slot():
    executor = SegmentExecutor(1, name="test-exec")
    done = []

    def boom() -> None:
        raise RuntimeError("boom")

    executor.submit(boom)
    executor.submit(done.append, "after")
    assert executor.wait_idle(10)
    assert done == ["after"] and executor.in_flight == 0


def test_concurrency_must_be_positive():
    with pytest.raises(ValueError):
        SegmentExecutor(0)
