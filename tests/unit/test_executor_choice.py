"""``NRLLM_AGENTS["EXECUTOR"]`` chooses the executor of queued runs (no database).

Guards what once was an ``if uses_rq(): … else`` inside ``dispatch``: the choice now comes
from one setting, and ``"auto"`` keeps the old behaviour (RQ exactly when ``REDIS_URL`` is set).
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from nrllm_agents import executors
from nrllm_agents.executors import dispatch

REDIS = "redis://127.0.0.1:6379/0"


@pytest.mark.parametrize(
    "executor, redis_url, expected",
    [
        (None, REDIS, executors.RQ),  # the default is "auto"
        (None, None, executors.LOCAL),
        ("auto", REDIS, executors.RQ),
        ("auto", None, executors.LOCAL),
        ("auto", "", executors.LOCAL),
        ("local", REDIS, executors.LOCAL),
        ("rq", REDIS, executors.RQ),
        ("rq", None, executors.RQ),  # refused by manage.py check (E009); dispatch then fails closed
    ],
)
def test_the_setting_picks_the_executor(settings, executor, redis_url, expected):
    settings.REDIS_URL = redis_url
    settings.NRLLM_AGENTS = {} if executor is None else {"EXECUTOR": executor}
    assert executors.chosen() is expected
    assert dispatch.uses_rq() is (expected is executors.RQ)


def test_the_environment_picks_the_executor(settings, monkeypatch):
    settings.REDIS_URL = REDIS
    settings.NRLLM_AGENTS = {}
    monkeypatch.setenv("NRLLM_EXECUTOR", "local")
    assert executors.chosen() is executors.LOCAL


def test_an_unknown_executor_is_refused_by_name(settings):
    settings.NRLLM_AGENTS = {"EXECUTOR": "celery"}
    with pytest.raises(
        ImproperlyConfigured, match="'auto', 'rq', 'local' or the dotted path of an Executor class, not 'celery'"
    ):
        executors.chosen()


class InlineExecutor:
    """An executor of a host's own: runs nothing, records what it was handed."""

    name = "inline"

    def __init__(self):
        self.submitted: list[str] = []

    def submit(self, run_id, *, job_id, delay_seconds=0):
        self.submitted.append(run_id)

    def holds(self, run_id, *, job_id, stale_after):
        return run_id in self.submitted

    def wait_idle(self, timeout):
        return True


def test_a_dotted_path_names_an_executor_class_as_djangos_task_backends_do(settings):
    """One instance per process, whatever the number of look-ups; the built-in ones by path too."""
    settings.NRLLM_AGENTS = {"EXECUTOR": f"{__name__}.InlineExecutor"}
    first = executors.chosen()
    assert isinstance(first, InlineExecutor) and executors.chosen() is first
    assert not dispatch.uses_rq()
    settings.NRLLM_AGENTS = {"EXECUTOR": "nrllm_agents.executors.local.LocalExecutor"}
    assert executors.chosen() is executors.LOCAL


def test_a_path_to_something_else_is_refused_by_name(settings):
    settings.NRLLM_AGENTS = {"EXECUTOR": "nrllm_agents.conf.DEFAULTS"}
    with pytest.raises(ImproperlyConfigured, match="is not an Executor class"):
        executors.chosen()
