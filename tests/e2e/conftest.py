"""Fixtures of the end-to-end tests that drive real rqworker processes."""

from __future__ import annotations

import pytest


@pytest.fixture
def queue(settings, redis_url):
    """This process dispatches to the test Redis; returns the django-rq queue."""
    import django_rq

    settings.REDIS_URL = redis_url
    settings.RQ_QUEUES = {"default": {"URL": redis_url}}
    return django_rq.get_queue("default")


@pytest.fixture
def worker_env(child_env, redis_url) -> dict[str, str]:
    """The environment of a worker process: the test database and the test Redis."""
    return {**child_env, "REDIS_URL": redis_url}
