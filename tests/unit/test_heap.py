"""A worker's heap is frozen out of the collector's reach, and again only after new imports."""

from __future__ import annotations

import gc
import sys
import time
import types

import pytest

from nrllm_agents.workers import heap


@pytest.fixture
def unfrozen():
    yield
    gc.unfreeze()  # the test process goes on as it was


def test_freeze_takes_what_is_loaded_out_of_full_collections(unfrozen):
    heap.freeze()
    frozen = gc.get_freeze_count()
    assert frozen > 10_000  # Django, the app, pytest: everything loaded so far
    t0 = time.perf_counter()
    gc.collect()
    assert time.perf_counter() - t0 < 1.0
    assert gc.get_freeze_count() >= frozen  # a full collection leaves the frozen objects alone


def test_refreeze_only_after_new_modules(unfrozen, monkeypatch):
    monkeypatch.setattr(heap, "_modules_at_freeze", 0)
    assert heap.refreeze_if_grown() is False  # never frozen: a process that is no worker
    assert gc.get_freeze_count() == 0
    heap.freeze()
    assert heap.refreeze_if_grown() is False
    before = gc.get_freeze_count()
    module = types.ModuleType("nrllm_heap_probe")
    module.table = [[i] for i in range(5_000)]  # what an SDK's import leaves behind (lists: tracked)
    monkeypatch.setitem(sys.modules, "nrllm_heap_probe", module)
    assert heap.refreeze_if_grown() is True
    assert gc.get_freeze_count() >= before + 5_000
    assert heap.refreeze_if_grown() is False
