"""Issue 20 items 4 and 7: the rate limiter and the slots are atomic under real threads.

Guards: DRF's throttles read the cache and then wrote it, so parallel requests all passed; the
interactive slots were shared by everyone in a process, and sync runs had no cap at all.

``transaction=True``: every thread of a race uses its own database connection, which must see
the counters the others committed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from nrllm_agents import admission
from nrllm_agents.admission import rates
from nrllm_agents.models import RateCounter
from tests.conftest import race_rounds

pytestmark = pytest.mark.django_db(transaction=True)

PERIOD = 60


def race(n: int, work: Callable[[], Any]) -> list[Any]:
    """``work()`` in ``n`` threads released at once; their results."""
    from django.db import connection

    start = threading.Barrier(n)
    results: list[Any] = []
    lock = threading.Lock()

    def run() -> None:
        start.wait()
        try:
            result = work()
        finally:
            connection.close()
        with lock:
            results.append(result)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(results) == n
    return results


@pytest.fixture(params=["database", "redis"])
def store(request, settings):
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "RATE_LIMIT_STORE": request.param}
    settings.REDIS_URL = request.getfixturevalue("redis_url") if request.param == "redis" else None
    admission.reset()
    yield request.param
    admission.reset()


def test_parallel_attempts_pass_exactly_the_allowance(store):
    for round_ in range(race_rounds(5)):
        # Mid-window: a race that straddled a window's end would rightly let one more pass (the
        # previous window weighs less each second), which is no break of atomicity.
        now = PERIOD * (1_000 + round_) + PERIOD / 2
        results = race(40, lambda: rates.attempt("race/60", f"user:{round_}", 10, PERIOD, now=now))
        assert sum(r is None for r in results) == 10, (store, round_)
        assert all(r.wait >= 1 for r in results if r is not None)


def test_the_previous_window_weighs_on_the_next(store):
    start = 1_000_000 * PERIOD  # the start of a window
    spent = [rates.attempt("edge/60", "u", 10, PERIOD, now=start + 59) for _ in range(12)]
    assert sum(r is None for r in spent) == 10
    # One second into the next window, 59/60 of the last one still counts, rounded up: the ten of
    # the last second are all within the last minute, and none more passes.
    early = [rates.attempt("edge/60", "u", 10, PERIOD, now=start + PERIOD + 1) for _ in range(3)]
    assert [r is None for r in early] == [False, False, False]
    assert 0 < early[0].wait <= PERIOD
    # Half-way through, half of it: five in this window.
    later = [rates.attempt("edge/60", "u", 10, PERIOD, now=start + PERIOD + 30) for _ in range(10)]
    assert sum(r is None for r in later) == 5


def test_a_refused_attempt_is_not_counted(store):
    """(In Redis the script returns before its INCR; in the database the guarded update.)"""
    for _ in range(5):
        rates.attempt("refused/60", "u", 2, PERIOD, now=PERIOD * 7)
    if store == "database":
        assert RateCounter.objects.get(scope="refused/60", ident="u").count == 2


def test_without_redis_the_attempt_is_counted_in_the_database(settings):
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "RATE_LIMIT_STORE": "redis"}
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens: refused at once
    try:
        results = [rates.attempt("down/60", "u", 3, PERIOD) for _ in range(5)]
    finally:
        admission.reset()  # forgets that Redis was down
    assert [r is None for r in results] == [True, True, True, False, False]


def test_old_windows_are_pruned_by_the_first_attempt_of_a_new_one(settings):
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "RATE_LIMIT_STORE": "database"}
    for window in range(5):
        rates.attempt("prune/60", "u", 3, PERIOD, now=PERIOD * (100 + window))
    assert sorted(RateCounter.objects.filter(scope="prune/60").values_list("period", flat=True)) == [103, 104]


@pytest.mark.parametrize("kind", list(admission.Kind))
def test_parallel_holds_take_exactly_the_per_user_cap(settings, kind):
    per_user, total = admission.slots.LIMITS[kind]
    # Slots earlier tests still hold (a test client's stream that nobody closed) count as well.
    before = admission.in_use(kind)
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, per_user: 3, total: 5 + before[0]}
    for round_ in range(race_rounds(5)):
        mine = race(20, lambda: admission.hold(kind, "alice"))
        held = [s for s in mine if isinstance(s, admission.Slot)]
        assert len(held) == 3
        refusal = next(s for s in mine if isinstance(s, admission.SlotRefused))
        assert refusal.per_user and "3" in refusal.detail
        others = race(20, lambda: admission.hold(kind, f"other-{round_}"))
        assert sum(isinstance(s, admission.Slot) for s in others) == 2  # the process's 5 in all
        assert any(isinstance(s, admission.SlotRefused) and not s.per_user for s in others)
        for slot in held + [s for s in others if isinstance(s, admission.Slot)]:
            slot.release()
            slot.release()  # idempotent
        assert admission.in_use(kind) == before
