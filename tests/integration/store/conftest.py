"""Fixtures of the module tests that call the store, the segment hook and the runtime directly."""

from __future__ import annotations

import pytest

from nrllm_agents.store import prepared


@pytest.fixture(params=[pytest.param("prepared", marks=pytest.mark.postgres_only), "portable"])
def store_path(request, monkeypatch):
    """Each fence with a PostgreSQL statement of its own (``store.prepared``) runs twice on
    PostgreSQL: through that statement and through the portable fence SQLite always takes
    (forced by answering ``prepared.enabled()`` with False). On SQLite only the portable run is
    left (``postgres_only``)."""
    if request.param == "portable":
        monkeypatch.setattr(prepared, "enabled", lambda: False)
    else:
        assert prepared.enabled(), "the prepared path needs PostgreSQL"
    return request.param
