"""System checks for the app's settings: ``manage.py check`` names every bad value.

Django runs them before ``runserver``, ``migrate`` and every management command, so a worker
or a web process with a bad setting refuses to start with a message that names the setting,
instead of failing on the first run that reads it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.core.exceptions import ImproperlyConfigured

from .admission import capacity
from .conf import DEFAULTS, RENAMED, Env, app_settings, renamed_in_use
from .crypto.vault import problem as vault_problem
from .executors import RQ
from .executors import named as executor_named
from .money import parsing

Rule = tuple[Callable[[Any], bool], str]


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


POSITIVE: Rule = (lambda v: _number(v) and v > 0, "a number greater than 0")
NON_NEGATIVE: Rule = (lambda v: _number(v) and v >= 0, "a number of 0 or more (0: off)")
POSITIVE_INT: Rule = (lambda v: _whole(v) and v > 0, "a whole number greater than 0")
COUNT: Rule = (lambda v: _whole(v) and v >= 0, "a whole number of 0 or more")
OPTIONAL_POSITIVE_INT: Rule = (lambda v: v is None or (_whole(v) and v > 0), "None or a whole number greater than 0")
FLAG: Rule = (lambda v: isinstance(v, bool), "True or False")
NAME: Rule = (lambda v: isinstance(v, str) and bool(v.strip()), "a non-empty string")
PATHS: Rule = (
    lambda v: isinstance(v, dict) and all(isinstance(k, str) and isinstance(p, str) for k, p in v.items()),
    "a dict of names to dotted paths",
)


def _amount(value: Any) -> bool:
    try:
        parsing.parse(value, parsing.Bounds())
    except parsing.InvalidAmount:
        return False
    return True


AMOUNT: Rule = (_amount, "a plain decimal above 0 (a string such as '12.50', or a whole number)")


def _names_an_executor(value: Any) -> bool:
    if value == "auto":
        return True
    try:
        executor_named(str(value))
    except ImproperlyConfigured:
        return False
    return True


def _rate_or_off(value: Any) -> bool:
    if value is None or value == "":
        return True
    from .admission.rates import parse_rate

    try:
        parsed = parse_rate(value) if isinstance(value, str) else None
    except (ValueError, KeyError):
        return False
    return parsed is not None and parsed[0] > 0


RULES: dict[str, Rule] = {
    "CURRENCY": NAME,
    "DEFAULT_MAX_COST": (lambda v: v is None or _amount(v), "None or " + AMOUNT[1]),
    "MAX_COST_LIMIT": AMOUNT,
    "SECRET_KEYS": (
        lambda v: isinstance(v, str) or (isinstance(v, (list, tuple)) and all(isinstance(k, str) for k in v)),
        "a list of Fernet keys, or a comma-separated string of them",
    ),
    "PROVIDERS": PATHS,
    "TOOLS": PATHS,
    "DEFAULT_PROVIDER": NAME,
    "QUEUE_NAME": NAME,
    "EXECUTOR": (_names_an_executor, "'auto', 'rq', 'local' or the dotted path of an Executor class"),
    "IN_DOUBT": (lambda v: v in ("wait", "fail"), "'wait' or 'fail'"),
    "THREAD_MULTITASK_STRATEGY": (
        lambda v: v in ("reject", "enqueue", "interrupt", "rollback"),
        "one of 'reject', 'enqueue', 'interrupt', 'rollback'",
    ),
    "DEFAULT_TOOLS": (
        lambda v: isinstance(v, (list, tuple)) and all(isinstance(t, str) for t in v),
        "a list of tool names",
    ),
    "DEFAULT_MAX_ITERATIONS": POSITIVE_INT,
    "MAX_ITERATIONS_LIMIT": POSITIVE_INT,
    "DEFAULT_DEADLINE_SECONDS": OPTIONAL_POSITIVE_INT,
    "DEADLINE_SECONDS_LIMIT": POSITIVE_INT,
    "DEFAULT_MAX_TOTAL_TOKENS": OPTIONAL_POSITIVE_INT,
    "MAX_TOTAL_TOKENS_LIMIT": POSITIVE_INT,
    "SLEEP_MAX_SECONDS": POSITIVE,
    "PROVIDER_TIMEOUT": POSITIVE,
    "PROVIDER_STREAM": FLAG,
    "ANTHROPIC_MODEL": NAME,
    "ANTHROPIC_MAX_TOKENS": POSITIVE_INT,
    "BUDGET_MAX_TOKENS": POSITIVE_INT,
    "GEMINI_MODEL": NAME,
    "LOCAL_WORKERS": POSITIVE_INT,
    "INTERACTIVE_WORKERS": POSITIVE_INT,
    "JOB_TIMEOUT": (
        lambda v: _whole(v) and (v == -1 or v > 0),
        "a whole number of seconds greater than 0, or -1 (no limit)",
    ),
    "LEASE_SECONDS": POSITIVE,
    "WORKER_DRAIN_SECONDS": NON_NEGATIVE,
    "MAX_ATTEMPTS": COUNT,
    "RETRY_BASE_SECONDS": POSITIVE,
    "RETRY_MAX_SECONDS": POSITIVE,
    "MAINTENANCE_SECONDS": POSITIVE,
    "RETENTION": (
        lambda v: (
            isinstance(v, dict)
            and set(v) <= {"content_days", "runs_days"}
            and all(OPTIONAL_POSITIVE_INT[0](d) for d in v.values())
        ),
        'a dict {"content_days": None or days, "runs_days": None or days}',
    ),
    "RETENTION_BATCH": POSITIVE_INT,
    "QUEUED_STALE_SECONDS": NON_NEGATIVE,
    "QUEUED_SWEEP_SECONDS": NON_NEGATIVE,
    "PREPARED_STATEMENTS": FLAG,
    "STREAM_POLL_SECONDS": POSITIVE,
    "STREAM_HEARTBEAT_SECONDS": POSITIVE,
    "STREAM_MAX_SECONDS": POSITIVE,
    "CANCEL_POLL_SECONDS": POSITIVE,
    "METRICS_TOKEN": (lambda v: isinstance(v, str), "a string"),
    "METRICS_ALLOW_LOCALHOST": FLAG,
    "METRICS_STATE_TTL": NON_NEGATIVE,
    "INTERACTIVE_MAX_PER_USER": COUNT,
    "SYNC_MAX_PER_USER": COUNT,
    "SYNC_MAX_OPEN": COUNT,
    "STREAM_MAX_OPEN": (
        lambda v: v is None or _whole(v),
        "None (half the server's threads) or a whole number (0: no bound)",
    ),
    "SERVER_THREADS": COUNT,
    "TREE_MAX_RUNS": COUNT,
    "RATE_LIMIT_STORE": (lambda v: v in ("auto", "redis", "database"), "one of 'auto', 'redis', 'database'"),
    "SIGN_IN_FAILURES": (_rate_or_off, "None, '' (off) or a rate such as '10/15min'"),
    "ALLOW_SCRIPTED": (lambda v: v is None or isinstance(v, bool), "None (follow DEBUG), True or False"),
    "MCP_SERVERS": (lambda v: isinstance(v, dict), 'a dict in the mcpServers shape ({"mcpServers": {...}})'),
    "MCP_CALL_TIMEOUT": POSITIVE,
    "MCP_MAX_RESULT_CHARS": POSITIVE_INT,
}


def _default_rule(default: Any) -> Rule | None:
    """For a setting without a rule of its own: the type of its default."""
    if isinstance(default, Env):
        default = default.default
    if isinstance(default, bool):
        return FLAG
    if _number(default):
        return NON_NEGATIVE
    if isinstance(default, str):
        return (lambda v: isinstance(v, str), "a string")
    return None


def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Every ``NRLLM_AGENTS`` setting (or its environment variable) has a usable value."""
    messages: list[CheckMessage] = []
    user = getattr(settings, "NRLLM_AGENTS", None) or {}
    if not isinstance(user, dict):
        return [Error("NRLLM_AGENTS must be a dict of settings", id="nrllm_agents.E001")]
    for old, new in renamed_in_use():
        messages.append(
            Warning(
                f"{old} is renamed {new}; the old name is read until the next release",
                hint=f"Set {new} instead.",
                id="nrllm_agents.W011",
            )
        )
    for unknown in sorted(set(user) - set(DEFAULTS) - set(RENAMED)):
        messages.append(
            Warning(
                f"NRLLM_AGENTS[{unknown!r}] is not a setting of nrllm_agents (a typo?)",
                hint="See nrllm_agents/conf.py for the settings.",
                id="nrllm_agents.W001",
            )
        )
    values: dict[str, Any] = {}
    for name, default in DEFAULTS.items():
        try:
            values[name] = value = getattr(app_settings, name)
        except ImproperlyConfigured as exc:
            messages.append(Error(f"NRLLM_AGENTS[{name!r}]: {exc}", id="nrllm_agents.E002"))
            continue
        rule = RULES.get(name) or _default_rule(default)
        if rule is not None and not rule[0](value):
            messages.append(
                Error(f"NRLLM_AGENTS[{name!r}] must be {rule[1]}, not {str(value)[:60]!r}", id="nrllm_agents.E003")
            )
    return messages + _consistency(values)


def _consistency(v: dict[str, Any]) -> list[CheckMessage]:
    """Settings that are each valid but do not fit together."""
    found: list[CheckMessage] = []

    def ok(*names: str) -> bool:
        return all(name in v and (RULES.get(name) or (lambda _: True, ""))[0](v[name]) for name in names)

    if ok("LEASE_SECONDS", "PROVIDER_TIMEOUT", "SLEEP_MAX_SECONDS") and v["LEASE_SECONDS"] <= max(
        v["PROVIDER_TIMEOUT"], v["SLEEP_MAX_SECONDS"]
    ):
        # A warning, not an error: drills and tests shorten the lease on purpose to watch the reaper.
        found.append(
            Warning(
                f"NRLLM_AGENTS['LEASE_SECONDS'] ({v['LEASE_SECONDS']:g}) should exceed the longest single step: "
                f"PROVIDER_TIMEOUT ({v['PROVIDER_TIMEOUT']:g}) and SLEEP_MAX_SECONDS ({v['SLEEP_MAX_SECONDS']:g})",
                hint="A segment renews its lease at every step boundary; a shorter lease lets the reaper take "
                "a run from a live worker.",
                id="nrllm_agents.W002",
            )
        )
    if ok("LEASE_SECONDS", "MCP_CALL_TIMEOUT") and v["LEASE_SECONDS"] <= v["MCP_CALL_TIMEOUT"]:
        found.append(
            Warning(
                f"NRLLM_AGENTS['LEASE_SECONDS'] ({v['LEASE_SECONDS']:g}) should exceed MCP_CALL_TIMEOUT "
                f"({v['MCP_CALL_TIMEOUT']:g}), the longest MCP tool call",
                hint="A segment renews its lease at every step boundary; a shorter lease lets the reaper take "
                "a run from a live worker.",
                id="nrllm_agents.W003",
            )
        )
    if ok("DEFAULT_MAX_ITERATIONS", "MAX_ITERATIONS_LIMIT") and v["DEFAULT_MAX_ITERATIONS"] > v["MAX_ITERATIONS_LIMIT"]:
        found.append(
            Error("NRLLM_AGENTS['DEFAULT_MAX_ITERATIONS'] exceeds MAX_ITERATIONS_LIMIT", id="nrllm_agents.E005")
        )
    if ok("PROVIDERS", "DEFAULT_PROVIDER") and v["DEFAULT_PROVIDER"] not in v["PROVIDERS"]:
        found.append(
            Error(
                f"NRLLM_AGENTS['DEFAULT_PROVIDER'] {v['DEFAULT_PROVIDER']!r} is not in PROVIDERS "
                f"({', '.join(sorted(v['PROVIDERS']))})",
                id="nrllm_agents.E006",
            )
        )
    if ok("TOOLS", "DEFAULT_TOOLS"):
        missing = sorted(set(v["DEFAULT_TOOLS"]) - set(v["TOOLS"]))
        if missing:
            found.append(
                Error(
                    f"NRLLM_AGENTS['DEFAULT_TOOLS'] names tools that TOOLS does not: {', '.join(missing)}",
                    id="nrllm_agents.E007",
                )
            )
    if (
        ok("EXECUTOR")
        and v["EXECUTOR"] != "auto"
        and executor_named(v["EXECUTOR"]) is RQ
        and not getattr(settings, "REDIS_URL", None)
    ):
        found.append(
            Error(
                "NRLLM_AGENTS['EXECUTOR'] is 'rq' but REDIS_URL is not set",
                hint="Set REDIS_URL to the Redis of the RQ workers, or choose 'auto' or 'local'.",
                id="nrllm_agents.E009",
            )
        )
    if ok("RATE_LIMIT_STORE") and v["RATE_LIMIT_STORE"] == "redis" and not getattr(settings, "REDIS_URL", None):
        found.append(
            Error(
                "NRLLM_AGENTS['RATE_LIMIT_STORE'] is 'redis' but REDIS_URL is not set",
                hint="Set REDIS_URL, or choose 'auto' or 'database'.",
                id="nrllm_agents.E013",
            )
        )
    from .admission import Action, rate_for

    for action in Action:
        try:
            rate_for(action)
        except (ValueError, KeyError, TypeError):
            found.append(
                Error(
                    f"REST_FRAMEWORK['DEFAULT_THROTTLE_RATES'][{action.value!r}] is not a rate such as '120/min'",
                    hint="NRLLM_THROTTLE_CREATE / NRLLM_THROTTLE_CANCEL: a count, '/', and s, min, hour or day.",
                    id="nrllm_agents.E012",
                )
            )
    if ok("SECRET_KEYS") and (problem := vault_problem()) is not None:
        found.append(
            Error(
                problem,
                hint="The first key encrypts connections' API keys; all of them decrypt.",
                id="nrllm_agents.E014",
            )
        )
    if ok("RETRY_BASE_SECONDS", "RETRY_MAX_SECONDS") and v["RETRY_BASE_SECONDS"] > v["RETRY_MAX_SECONDS"]:
        found.append(Error("NRLLM_AGENTS['RETRY_BASE_SECONDS'] exceeds RETRY_MAX_SECONDS", id="nrllm_agents.E008"))
    return found


def check_deploy_database(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``check --deploy``: what ``migrate`` (or a cache table) still owes the database.

    Every table nrllm_agents needs, the rate limits' included, comes from a migration, so an
    unapplied migration is the one thing a deploy can miss; a host project that keeps Django's
    database cache is told when its table is missing (``createcachetable``).
    """
    from django.core.cache import caches
    from django.core.cache.backends.db import DatabaseCache
    from django.db import DatabaseError, connections
    from django.db.migrations.executor import MigrationExecutor

    found: list[CheckMessage] = []
    for alias in databases or ["default"]:
        connection = connections[alias]
        try:
            executor = MigrationExecutor(connection)
            pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
            tables = set(connection.introspection.table_names())
        except DatabaseError as exc:
            found.append(
                Warning(
                    f"database {alias!r} could not be read to check its migrations: {type(exc).__name__}",
                    id="nrllm_agents.W010",
                )
            )
            continue
        finally:
            connection.close()
        if pending:
            names = ", ".join(f"{m.app_label}.{m.name}" for m, _ in pending[:5])
            more = f" and {len(pending) - 5} more" if len(pending) > 5 else ""
            found.append(
                Error(
                    f"database {alias!r} lacks {len(pending)} migrations ({names}{more})",
                    hint="Run `python manage.py migrate`.",
                    id="nrllm_agents.E010",
                )
            )
        if alias == "default":
            for name in settings.CACHES:
                cache = caches[name]
                # django-stubs omit the private ``_table`` every DatabaseCache sets in __init__
                table = cache._table if isinstance(cache, DatabaseCache) else None  # type: ignore[attr-defined]
                if table is not None and table not in tables:
                    found.append(
                        Error(
                            f"cache {name!r} is a database cache and its table {table!r} does not exist",
                            hint="Run `python manage.py createcachetable`, or use another cache backend.",
                            id="nrllm_agents.E011",
                        )
                    )
    return found


def check_mcp_servers(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """The MCP configuration parses; under ``manage.py check`` every server is also started and listed.

    Only the ``check`` command probes the servers: every other command (a worker, ``runserver``)
    runs the checks too, and must not start servers it may never use.
    """
    import sys

    from .domain import ConfigurationError
    from .mcp import catalog

    try:
        catalog.servers()
    except ConfigurationError as exc:
        return [Error(str(exc), id="nrllm_agents.E015")]
    if sys.argv[1:2] != ["check"]:
        return []
    return [
        Error(
            f"MCP server {row['server']!r} is unavailable: {row['error']}",
            hint="agent_tools lists what each server offers; fix its entry in NRLLM_MCP_CONFIG or MCP_SERVERS.",
            id="nrllm_agents.E016",
        )
        for row in catalog.health()
        if not row["ok"]
    ]


def check_connection_keys(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Under ``manage.py check`` (``--deploy`` too): one stored key of each connection kind opens
    with the configured ``NRLLM_SECRET_KEYS``. A wrong key list otherwise starts cleanly and fails
    every run on a connection. Other commands skip it, as they skip the MCP probe: a worker's
    parent opens no database connection it does not need.
    """
    import sys

    if sys.argv[1:2] != ["check"]:
        return []
    return connection_key_problems()


def connection_key_problems() -> list[CheckMessage]:
    """``check_connection_keys``'s findings, whatever the command (nothing before ``migrate``)."""
    from django.db import DatabaseError

    from .catalog.registry import ROTATE_HINT
    from .crypto.vault import VaultError, decrypt
    from .models import Connection

    found: list[CheckMessage] = []
    try:
        rows = Connection.objects.exclude(encrypted_key="").order_by("kind", "name")
        seen: dict[str, tuple[str, str]] = {}
        for kind, name, token in rows.values_list("kind", "name", "encrypted_key"):
            seen.setdefault(kind, (name, token))
    except DatabaseError:  # no table yet: E010 (check --deploy) says what migrate owes
        return []
    for kind, (name, token) in sorted(seen.items()):
        try:
            decrypt(token)
        except VaultError as exc:
            found.append(
                Error(
                    f"connection {name!r} ({kind}): {exc}",
                    hint=ROTATE_HINT[0].upper() + ROTATE_HINT[1:] + ".",
                    id="nrllm_agents.E017",
                )
            )
    return found


def check_tracing(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """The OTEL_* variables ask for OTLP trace export: the SDK and its exporter must be installed."""
    from .observability import tracing

    missing = tracing.sdk_missing() if tracing.asked_by_environment() else None
    if missing is None:
        return []
    return [
        Warning(
            f"OTEL_EXPORTER_OTLP_ENDPOINT asks for traces, but {missing} cannot be imported: nothing is traced",
            hint='pip install "nrllm-agents[otel]" (opentelemetry-sdk, opentelemetry-exporter-otlp-proto-http)',
            id="nrllm_agents.W012",
        )
    ]


def check_extras(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """What the settings ask for has its extra installed: the default provider's SDK, the MCP client."""
    from .catalog import extras
    from .conf import app_settings

    wanted: list[tuple[str, extras.Extra]] = []
    default = app_settings.DEFAULT_PROVIDER
    if default in extras.PROVIDERS:
        wanted.append((f"DEFAULT_PROVIDER {default!r}", extras.PROVIDERS[default]))
    if app_settings.MCP_SERVERS or app_settings.MCP_CONFIG:
        wanted.append(("MCP servers (MCP_SERVERS / NRLLM_MCP_CONFIG)", extras.MCP))
    found: list[CheckMessage] = []
    for feature, extra in wanted:
        missing = extra.missing()
        if missing is not None:
            found.append(
                Error(
                    f"{feature} needs {missing!r}, which is not installed",
                    hint=extra.hint(),
                    id="nrllm_agents.E020",
                )
            )
    return found


# the apps the app leans on (docs/quickstart.md): the API, its tokens, its schema and offline docs, the queue dashboard
REQUIRED_APPS = (
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_rq",
)
# the edge guard by its public path (the one a message names), and by the older private one
EDGE_MIDDLEWARE = "nrllm_agents.middleware.EdgeGuardMiddleware"
EDGE_MIDDLEWARE_PATHS = (EDGE_MIDDLEWARE, "nrllm_agents.http.edge.EdgeGuardMiddleware")


def check_host(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """The host project is set up as the quickstart says: the apps, the edge guard, RQ's queues."""
    from django.apps import apps

    from .executors import RQ, chosen

    found: list[CheckMessage] = [
        Error(
            f"nrllm_agents needs {name!r} in INSTALLED_APPS",
            hint="Add it before 'nrllm_agents' (docs/quickstart.md lists the apps).",
            id="nrllm_agents.E021",
        )
        for name in REQUIRED_APPS
        if not apps.is_installed(name)
    ]
    if not set(EDGE_MIDDLEWARE_PATHS) & set(getattr(settings, "MIDDLEWARE", None) or ()):
        found.append(
            Warning(
                f"{EDGE_MIDDLEWARE} is not in MIDDLEWARE: a NUL character in a query or form reaches "
                "the views (a 500 on PostgreSQL) and oversized API bodies are read whole",
                hint="Insert it right after SecurityMiddleware.",
                id="nrllm_agents.W013",
            )
        )
    try:
        rq_chosen = chosen() is RQ
    except ImproperlyConfigured:  # a bad EXECUTOR is check_settings' to name
        rq_chosen = False
    if rq_chosen and not getattr(settings, "RQ_QUEUES", None):
        found.append(
            Error(
                "runs go to RQ workers (REDIS_URL is set) but RQ_QUEUES is not set",
                hint=f'Set RQ_QUEUES = {{"{app_settings.QUEUE_NAME}": {{"URL": REDIS_URL}}}} '
                "(docs/operations/workers.md).",
                id="nrllm_agents.E022",
            )
        )
    return found


def check_tool_names(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Every tool name is offered once: no two apps' typed tools, nor one with a tool of the
    settings or of an MCP server (listed by this process; under ``manage.py check``, every server's)."""
    import sys

    from .catalog import app_tools
    from .conf import app_settings
    from .mcp import catalog as mcp_catalog

    def clash(name: str, one: str, other: str) -> Error:
        return Error(
            f"two tools are named {name!r}: {one} and {other}",
            hint="Give one of them another name (@tool(name=...), the TOOLS key, or the MCP server's name).",
            id="nrllm_agents.E023",
        )

    found: list[CheckMessage] = [
        clash(kept.tool.name, f"@tool in {kept.module}", f"@tool in {other.module}")
        for kept, other in app_tools.clashes()
    ]
    typed = app_tools.tools()
    for name, where in sorted(typed.items()):
        if name in app_settings.TOOLS:
            found.append(clash(name, f"@tool in {where.module}", f"NRLLM_AGENTS['TOOLS'] ({app_settings.TOOLS[name]})"))
    if typed and mcp_catalog.configured():
        try:
            mcp_servers = (
                mcp_catalog.refresh(force=True).servers_by_tool()
                if sys.argv[1:2] == ["check"]
                else mcp_catalog.listed_servers()
            )
        except Exception:  # an unreadable MCP configuration is check_mcp_servers' to name
            mcp_servers = {}
        for name in sorted(mcp_servers.keys() & typed.keys()):
            found.append(
                clash(name, f"@tool in {typed[name].module}", f"a tool of the MCP server {mcp_servers[name]!r}")
            )
    return found


def check_transactional_tools(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """A transactional tool's writes go to the database its runs are stored in: one transaction
    holds both. Where database routers decide, the tool names the models it writes (``models``)
    and each must route its writes there."""
    from django.apps import apps
    from django.db import router
    from django.utils.module_loading import import_string

    from .catalog import app_tools
    from .conf import app_settings
    from .models import AgentRun

    tools: list[tuple[str, Any]] = []
    for name, path in sorted(app_settings.TOOLS.items()):
        try:
            tools.append((f"{name!r} (NRLLM_AGENTS['TOOLS'])", import_string(path)(None)))
        except Exception:  # a tool that cannot be built is named where it is listed (agent_tools)
            continue
    tools += [(f"{name!r} (@tool in {found.module})", found.tool) for name, found in sorted(app_tools.tools().items())]
    runs_db = router.db_for_write(AgentRun)
    found: list[CheckMessage] = []
    hint = "See docs/howto/tools.md, 'Writes that commit with their step'."
    for named, tool in tools:
        if not getattr(tool, "transactional", False):
            continue
        models = tuple(getattr(tool, "models", ()) or ())
        if not models and settings.DATABASE_ROUTERS:
            found.append(
                Error(
                    f"the transactional tool {named} names no models, and DATABASE_ROUTERS may send its writes "
                    f"to another database than its runs' ({runs_db!r})",
                    hint=f"Name what it writes: @tool(transactional=True, models=[...]) or models = [...]. {hint}",
                    id="nrllm_agents.E024",
                )
            )
        for model in models:
            try:
                resolved = apps.get_model(model) if isinstance(model, str) else model
                db = router.db_for_write(resolved)
            except (LookupError, ValueError, TypeError, AttributeError):
                found.append(
                    Error(
                        f"the transactional tool {named} names {model!r}, no model", hint=hint, id="nrllm_agents.E024"
                    )
                )
                continue
            if db != runs_db:
                found.append(
                    Error(
                        f"the transactional tool {named} writes {resolved._meta.label} to the database {db!r}, "
                        f"and its runs are stored in {runs_db!r}: one transaction cannot hold both",
                        hint=f"Route those writes to {runs_db!r}, or make the tool not transactional. {hint}",
                        id="nrllm_agents.E024",
                    )
                )
    return found


def check_stream_capacity(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``STREAM_MAX_OPEN`` set above the server's threads (when they are known): open streams
    would hold every thread, and other requests wait unanswered."""
    try:
        chosen, threads = app_settings.STREAM_MAX_OPEN, capacity.server_threads()
    except (ImproperlyConfigured, ValueError):  # an unusable value is check_settings' to name
        return []
    if threads is None or chosen is None or not _whole(chosen) or 0 < chosen < threads:
        return []
    allowed = "no bound" if chosen <= 0 else str(chosen)
    return [
        Warning(
            f"NRLLM_AGENTS['STREAM_MAX_OPEN'] ({allowed}) is not below the server's {threads} request threads: "
            "open streams can hold every thread, and other requests wait unanswered",
            hint="Leave STREAM_MAX_OPEN unset (half the threads), set it below the server's threads, or give the "
            "server more (gunicorn --threads). See docs/operations/deploy.md.",
            id="nrllm_agents.W014",
        )
    ]


# Every check of this app also carries this tag: `check --tag nrllm_agents`, and a command that
# serves no URL can ask for this app's checks without the web's (``management/console``).
TAG = "nrllm_agents"


def register_all() -> None:
    """Register these checks with Django's registry; the app's ``ready()`` calls it (once is enough:
    the registry keeps a set)."""
    register(check_settings, Tags.compatibility, TAG)
    # Not tagged "database": Django runs those only with `check --database`, and a deploy check
    # that needs `--database` to speak would stay as silent as before.
    register(check_deploy_database, "deploy", TAG, deploy=True)
    register(check_mcp_servers, Tags.compatibility, TAG)
    register(check_connection_keys, Tags.security, TAG)
    register(check_tracing, Tags.compatibility, TAG)
    register(check_extras, Tags.compatibility, TAG)
    register(check_host, Tags.compatibility, TAG)
    register(check_tool_names, Tags.compatibility, TAG)
    register(check_stream_capacity, Tags.compatibility, TAG)
    register(check_transactional_tools, Tags.compatibility, TAG)
