"""Settings are validated once, by Django's system checks: ``manage.py check`` names the bad value.

Guards what once happened: a bad NRLLM_JOB_TIMEOUT or a lease shorter than the model timeout
surfaced only when a run was enqueued, and a non-number in an NRLLM_* variable crashed the
import of the settings module with a bare ValueError.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.test import override_settings

from nrllm_agents import checks
from nrllm_agents.checks import check_settings


def ids(**nrllm: object) -> list[str]:
    with override_settings(NRLLM_AGENTS=nrllm):
        return sorted(m.id for m in check_settings())


def test_the_defaults_pass():
    assert ids() == []


@pytest.mark.parametrize(
    "name, value",
    [
        ("LEASE_SECONDS", 0),
        ("LEASE_SECONDS", "300"),
        ("JOB_TIMEOUT", 0),
        ("JOB_TIMEOUT", 1.5),
        ("MAX_ATTEMPTS", -1),
        ("LOCAL_WORKERS", True),
        ("CANCEL_POLL_SECONDS", -1),
        ("PROVIDER_STREAM", "yes"),
        ("DEFAULT_DEADLINE_SECONDS", 0),
        ("QUEUE_NAME", " "),
        ("TOOLS", ["calculator"]),
        ("EXECUTOR", "threads"),
        ("EXECUTOR", None),
        ("RETENTION", {"content_days": 0, "runs_days": None}),
        ("RETENTION", {"content_days": 90, "run_days": 400}),
        ("RETENTION", 90),
        ("RETENTION_BATCH", 0),
    ],
)
def test_a_bad_value_is_named(name, value):
    with override_settings(NRLLM_AGENTS={name: value}):
        messages = check_settings()
    assert [m.id for m in messages] == ["nrllm_agents.E003"]
    assert f"NRLLM_AGENTS[{name!r}]" in messages[0].msg


def test_settings_that_do_not_fit_together_are_named():
    assert ids(LEASE_SECONDS=30, PROVIDER_TIMEOUT=60, MCP_CALL_TIMEOUT=20) == ["nrllm_agents.W002"]
    assert ids(LEASE_SECONDS=100, MCP_CALL_TIMEOUT=120) == ["nrllm_agents.W003"]
    assert ids(DEFAULT_MAX_ITERATIONS=50, MAX_ITERATIONS_LIMIT=10) == ["nrllm_agents.E005"]
    assert ids(DEFAULT_PROVIDER="nope") == ["nrllm_agents.E006"]
    assert ids(DEFAULT_TOOLS=["calculator", "nope"]) == ["nrllm_agents.E007"]
    assert ids(LEASE_SECONDS_TYPO=1) == ["nrllm_agents.W001"]


def test_the_rq_executor_needs_redis(settings):
    settings.REDIS_URL = None
    assert ids(EXECUTOR="rq") == ["nrllm_agents.E009"]
    assert ids(EXECUTOR="auto") == ids(EXECUTOR="local") == []
    settings.REDIS_URL = "redis://127.0.0.1:6379/0"
    assert ids(EXECUTOR="rq") == ids(EXECUTOR="local") == []


def test_a_bad_environment_variable_is_named(monkeypatch):
    monkeypatch.setenv("NRLLM_LEASE_SECONDS", "five minutes")
    messages = check_settings()
    assert [m.id for m in messages] == ["nrllm_agents.E002"]
    assert "NRLLM_LEASE_SECONDS='five minutes'" in messages[0].msg


@pytest.mark.parametrize(
    "name, value",
    [("RATE_LIMIT_STORE", "memcached"), ("ALLOW_SCRIPTED", "yes"), ("SYNC_MAX_PER_USER", -1), ("SYNC_MAX_OPEN", 1.5)],
)
def test_the_limits_settings_are_checked(name, value):
    assert ids(**{name: value}) == ["nrllm_agents.E003"]


def test_a_malformed_rate_is_named():
    """A bad NRLLM_THROTTLE_CREATE would otherwise fail every create (issue 20, the limiter)."""
    import copy

    from django.conf import settings

    rest = copy.deepcopy(settings.REST_FRAMEWORK)
    rest["DEFAULT_THROTTLE_RATES"]["run_create"] = "lots"
    with override_settings(REST_FRAMEWORK=rest):
        assert sorted(m.id for m in check_settings()) == ["nrllm_agents.E012"]


def test_a_redis_rate_store_needs_redis():
    with override_settings(REDIS_URL=None):
        assert ids(RATE_LIMIT_STORE="redis") == ["nrllm_agents.E013"]
    with override_settings(REDIS_URL="redis://127.0.0.1:6379/0"):
        assert ids(RATE_LIMIT_STORE="redis") == []


def test_the_old_provider_setting_names_are_read_for_one_release_and_warned(monkeypatch):
    """OPENAI_TIMEOUT and OPENAI_STREAM governed all three vendors; their new names say so."""
    from nrllm_agents.conf import app_settings

    with override_settings(NRLLM_AGENTS={"OPENAI_TIMEOUT": 12.5}):
        assert app_settings.PROVIDER_TIMEOUT == 12.5
    assert ids(OPENAI_TIMEOUT=12.5) == ["nrllm_agents.W011"]
    with override_settings(NRLLM_AGENTS={"OPENAI_TIMEOUT": 12.5, "PROVIDER_TIMEOUT": 7.0}):
        assert app_settings.PROVIDER_TIMEOUT == 7.0  # the new name wins
    monkeypatch.setenv("NRLLM_OPENAI_STREAM", "0")
    assert app_settings.PROVIDER_STREAM is False
    assert ids() == ["nrllm_agents.W011"]
    monkeypatch.setenv("NRLLM_PROVIDER_STREAM", "1")
    assert app_settings.PROVIDER_STREAM is True


def test_the_pages_the_hints_point_to_exist():
    """E022's hint once sent readers to docs/operations.md, a page that does not exist."""
    pages = set(re.findall(r"docs/[\w/.-]+\.md", Path(checks.__file__).read_text()))
    root = Path(__file__).resolve().parents[2]
    assert "docs/operations/workers.md" in pages
    assert [page for page in sorted(pages) if not (root / page).is_file()] == []


# --- E024: a transactional tool writes to its runs' database -------------------------------------
class NotesElsewhere:
    """A router that sends ``Note`` writes to another database."""

    def db_for_write(self, model, **hints):
        return "archive" if model._meta.model_name == "note" else None


class Ledger:
    name, description, parameters, requires_approval = "ledger", "d", {"type": "object"}, False
    transactional = True
    models: tuple[str, ...] = ("nrllm_agents.Note",)

    def __init__(self, run_id=None):
        pass

    def execute(self, arguments):
        return None


class Unnamed(Ledger):
    models = ()


class Wrong(Ledger):
    models = ("nrllm_agents.NoSuchModel",)


ROUTER = f"{__name__}.NotesElsewhere"


@pytest.mark.parametrize(
    "tool, routers, said",
    [
        ("Ledger", [], None),  # one database: nothing to check
        ("Unnamed", [], None),
        ("Ledger", [ROUTER], "writes nrllm_agents.Note to the database 'archive'"),
        ("Unnamed", [ROUTER], "names no models"),
        ("Wrong", [], "names 'nrllm_agents.NoSuchModel', no model"),
    ],
)
def test_a_transactional_tool_must_write_to_its_runs_database(tool, routers, said):
    with override_settings(NRLLM_AGENTS={"TOOLS": {"ledger": f"{__name__}.{tool}"}}, DATABASE_ROUTERS=routers):
        found = checks.check_transactional_tools()
    if said is None:
        assert found == []
    else:
        assert [m.id for m in found] == ["nrllm_agents.E024"] and said in found[0].msg, found
        assert "docs/howto/tools.md" in found[0].hint
