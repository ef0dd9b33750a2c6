"""A worker's heap is frozen out of the collector's reach, and again only after new imports."""

from __future__ import annotations

import gc
import sys
import types
import weakref

import pytest

from nrllm_agents.workers import heap


@pytest.fixture
def unfrozen():
    yield
    gc.unfreeze()  # the test process goes on as it was


class Node:
    pass


def test_freeze_takes_what_is_loaded_out_of_full_collections(unfrozen):
    cycle = Node()
    cycle.me = cycle  # only the collector can free a cycle
    alive = weakref.ref(cycle)
    assert heap.freeze() > 10_000  # Django, the app, pytest: everything loaded so far
    del cycle
    gc.collect()
    assert alive() is not None  # frozen: a full collection never looks at it
    gc.unfreeze()
    gc.collect()
    assert alive() is None  # back within reach, it is collected


def test_refreeze_only_after_new_modules(unfrozen, monkeypatch):
    monkeypatch.setattr(heap, "_modules_at_freeze", 0)
    assert heap.refreeze_if_grown() is False  # never frozen: a process that is no worker
    assert gc.get_freeze_count() == 0
    heap.freeze()
    assert heap.refreeze_if_grown() is False
    before = gc.get_freeze_count()
    module = types.ModuleType("nrllm_heap_probe")
    module.table = [[i] for i in range(5_000)]  # what an SDK's import leaves behind (lists: tracked)
    module.cycle = Node()
    module.cycle.me = module.cycle
    alive = weakref.ref(module.cycle)
    monkeypatch.setitem(sys.modules, "nrllm_heap_probe", module)
    assert heap.refreeze_if_grown() is True
    # the table is frozen too (a few objects frozen before may have died since: freed by
    # reference counting, they leave the frozen count)
    assert gc.get_freeze_count() >= before + 4_900
    del module.cycle
    gc.collect()
    assert alive() is not None  # what the new module held is out of the collector's reach
    assert heap.refreeze_if_grown() is False
