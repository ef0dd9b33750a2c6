"""Settings of nrllm_agents: ``settings.NRLLM_AGENTS`` over environment variables over defaults.

Read lazily, on first use, and validated by Django's system checks (``checks.py``): a bad value
is named by ``manage.py check`` (and at every start of ``runserver`` or a worker), never met
halfway through a run. A value from the environment is parsed to the default's type.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured

_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off", ""}


@dataclass(frozen=True)
class Env:
    """A default read from environment variable ``name`` (parsed as ``kind``), else ``default``."""

    name: str
    kind: type
    default: Any

    def resolve(self) -> Any:
        raw = os.environ.get(self.name)
        if raw is None:
            return self.default
        text = raw.strip()
        try:
            if self.kind is bool:
                if text.lower() not in _TRUE | _FALSE:
                    raise ValueError(text)
                return text.lower() in _TRUE
            return self.kind(text)
        except ValueError:
            raise ImproperlyConfigured(
                f"environment variable {self.name}={raw[:40]!r} is not a valid {self.kind.__name__}"
            ) from None


def env(name: str, kind: type, default: Any) -> Any:
    """Environment variable ``name`` parsed as ``kind`` (``bool``: 1/true/yes/on or
    0/false/no/off/empty), else ``default``; raises ``ImproperlyConfigured`` naming the variable
    for anything else. The one parser of the environment: the app's settings and a host's
    settings module (``config/settings.py``) read it through here."""
    return Env(name, kind, default).resolve()


DEFAULTS: dict[str, Any] = {
    # name -> dotted path of a factory ``(request, run_id) -> Provider``; the built-in ones by their
    # public paths (the older ``nrllm_agents.catalog.registry.*`` ones, in hosts' settings, still import)
    "PROVIDERS": {
        "scripted": "nrllm_agents.providers.scripted_provider",
        "openai": "nrllm_agents.providers.openai_provider",
        "anthropic": "nrllm_agents.providers.anthropic_provider",
        "gemini": "nrllm_agents.providers.gemini_provider",
    },
    # name -> dotted path of a factory ``(run_id) -> Tool``
    "TOOLS": {
        "calculator": "nrllm_agents.tools.calculator_tool",
        "current_time": "nrllm_agents.tools.current_time_tool",
        "sleep": "nrllm_agents.tools.sleep_tool",
        "write_note": "nrllm_agents.tools.WriteNote",
    },
    # MCP servers in the ``{"mcpServers": {...}}`` shape (docs/howto/mcp.md), from a
    # JSON file (MCP_CONFIG) and from here; their tools are offered as ``<server>__<tool>``
    "MCP_SERVERS": {},
    "MCP_CONFIG": Env("NRLLM_MCP_CONFIG", str, ""),
    # the deadline of one MCP tool call (a server's own ``timeout`` wins), and the largest result kept
    "MCP_CALL_TIMEOUT": Env("NRLLM_MCP_CALL_TIMEOUT", float, 120.0),
    "MCP_MAX_RESULT_CHARS": 100_000,
    "DEFAULT_PROVIDER": "scripted",
    "DEFAULT_TOOLS": ["calculator", "current_time", "sleep"],
    "DEFAULT_MAX_ITERATIONS": 10,
    "MAX_ITERATIONS_LIMIT": 100,
    # Trees of runs (runtime.trees): the deepest a sub-agent run may sit (the root is depth 0),
    # and how many sub-agent calls one model turn may start.
    "MAX_TREE_DEPTH": 3,
    "MAX_FAN_OUT": 16,
    # the most runs one tree may hold, its root included: past it a sub-agent call starts no run
    # and is answered with a tool error (0: no bound but the depth and the fan-out)
    "TREE_MAX_RUNS": Env("NRLLM_TREE_MAX_RUNS", int, 64),
    # Limits per run (nrllm_agents.runtime.limits). A request may set its own up to the *_LIMIT bound;
    # one that sets none gets the default (None: no deadline / no budget).
    # a run that sets no deadline stops after an hour (None: no deadline unless the request sets one)
    "DEFAULT_DEADLINE_SECONDS": Env("NRLLM_DEFAULT_DEADLINE_SECONDS", int, 3600),
    "DEADLINE_SECONDS_LIMIT": 7 * 24 * 3600,
    "DEFAULT_MAX_TOTAL_TOKENS": None,
    "MAX_TOTAL_TOKENS_LIMIT": 100_000_000,
    # Spend (nrllm_agents.money.pricing): the currency every price is in, and a cost limit per run
    # (a decimal amount; None: no limit unless the request sets one).
    "CURRENCY": Env("NRLLM_CURRENCY", str, "USD"),
    "DEFAULT_MAX_COST": None,
    "MAX_COST_LIMIT": "1000000",
    # The most answer tokens a model call may produce: sent with every openai and gemini request
    # (anthropic: ANTHROPIC_MAX_TOKENS), and what a call reserves beyond its prompt (store.budgets)
    "BUDGET_MAX_TOKENS": Env("NRLLM_BUDGET_MAX_TOKENS", int, 4096),
    # Keys that encrypt connections' API keys at rest (nrllm_agents.crypto.vault): Fernet keys, a list
    # or a comma-separated string; the first encrypts, every one decrypts (rotation). Empty: in
    # development a key derived from SECRET_KEY; in production a system check error.
    "SECRET_KEYS": Env("NRLLM_SECRET_KEYS", str, ""),
    "SLEEP_MAX_SECONDS": 30.0,
    # every model provider (openai, anthropic, gemini): the deadline of one call, and whether
    # answers stream (live text, and a cancel keeps what arrived); off: one response, and a
    # cancel still aborts the call by closing its connection
    "PROVIDER_TIMEOUT": Env("NRLLM_PROVIDER_TIMEOUT", float, 60.0),
    "PROVIDER_STREAM": Env("NRLLM_PROVIDER_STREAM", bool, True),
    # a run that names no model gets these (the key and server: each SDK's own variables, docs/howto/providers.md)
    "ANTHROPIC_MODEL": Env("NRLLM_ANTHROPIC_MODEL", str, "claude-sonnet-4-5"),
    "ANTHROPIC_MAX_TOKENS": Env("NRLLM_ANTHROPIC_MAX_TOKENS", int, 4096),
    "GEMINI_MODEL": Env("NRLLM_GEMINI_MODEL", str, "gemini-2.5-flash"),
    "QUEUE_NAME": "default",
    # a run whose worker was lost during a non-idempotent, non-transactional tool call: "wait" for a
    # person to say whether the call happened (it waits like an approval), or "fail" it at once
    "IN_DOUBT": Env("NRLLM_IN_DOUBT", str, "wait"),
    # who executes queued runs: "rq" (RQ workers; needs REDIS_URL), "local" (threads of the
    # process that queued them), or "auto": RQ when REDIS_URL is set, else local
    "EXECUTOR": Env("NRLLM_EXECUTOR", str, "auto"),
    # runs the in-process executor executes at once, one thread each; more wait.
    # A run holds no database connection between its step boundaries, so this can be large.
    "LOCAL_WORKERS": Env("NRLLM_LOCAL_WORKERS", int, 200),
    # interactive playground runs executing at once in one web process, and per user; more are refused
    "INTERACTIVE_WORKERS": Env("NRLLM_INTERACTIVE_WORKERS", int, 8),
    "INTERACTIVE_MAX_PER_USER": Env("NRLLM_INTERACTIVE_MAX_PER_USER", int, 2),
    # API runs executing in the request's thread (mode sync, sync approvals), per user and per
    # process; more get 429 (admission.slots). Keep both below the server's threads.
    "SYNC_MAX_PER_USER": Env("NRLLM_SYNC_MAX_PER_USER", int, 2),
    "SYNC_MAX_OPEN": Env("NRLLM_SYNC_MAX_OPEN", int, 8),
    # where the rate limits count (admission.rates): "redis", "database", or "auto" (Redis when
    # REDIS_URL is set, else the database)
    "RATE_LIMIT_STORE": Env("NRLLM_RATE_LIMIT_STORE", str, "auto"),
    # failed sign-ins of one username from one address before its sign-in is refused for the
    # rest of the window, even with the right password (access.signin); None or "": off
    "SIGN_IN_FAILURES": Env("NRLLM_SIGN_IN_FAILURES", str, "10/15min"),
    # the scripted provider (a test double) for API and playground users: None follows DEBUG
    # (on in development, off in production); the commands may always use it
    "ALLOW_SCRIPTED": Env("NRLLM_ALLOW_SCRIPTED", bool, None),
    # RQ's default 180 s job timeout would kill long runs; -1 means no timeout.
    "JOB_TIMEOUT": Env("NRLLM_JOB_TIMEOUT", int, 3600),
    # how long a segment owns a run without renewing; renewed at every step boundary, so it
    # must exceed the longest single step (a model call's timeout, the longest tool)
    "LEASE_SECONDS": Env("NRLLM_LEASE_SECONDS", float, 300.0),
    # agent_worker on SIGTERM: how long the steps in flight (a model call, a tool) may run on to
    # their boundary before they are cut short; then every run goes back to the queue (at most
    # LEASE_SECONDS: a step running longer has lost its run to the reaper anyway)
    "WORKER_DRAIN_SECONDS": Env("NRLLM_WORKER_DRAIN_SECONDS", float, 30.0),
    # requeues a run may take (transient provider failures and reaped workers share it)
    "MAX_ATTEMPTS": Env("NRLLM_MAX_ATTEMPTS", int, 3),
    # retry delay: RETRY_BASE_SECONDS * 2**attempt, capped at RETRY_MAX_SECONDS
    "RETRY_BASE_SECONDS": Env("NRLLM_RETRY_BASE_SECONDS", float, 2.0),
    "RETRY_MAX_SECONDS": Env("NRLLM_RETRY_MAX_SECONDS", float, 300.0),
    # how often every worker runs the reaper and the queued sweep by itself (maintenance.py)
    "MAINTENANCE_SECONDS": Env("NRLLM_MAINTENANCE_SECONDS", float, 60.0),
    # Retention (store.retention), applied by every worker's maintenance pass and by
    # ``agent_retention``: past ``content_days`` a stopped run's content (prompt, messages, model
    # text, tool arguments and results, notes, approval comments, request payload) is purged and
    # its skeleton kept; past ``runs_days`` it is deleted whole, with its tree. None: never.
    "RETENTION": {"content_days": None, "runs_days": None},
    # runs one retention batch touches: each batch is one short transaction
    "RETENTION_BATCH": Env("NRLLM_RETENTION_BATCH", int, 200),
    # queued runs older than this with no job anywhere in RQ are dispatched again (recovery.py); a
    # grace for the instant between a commit and its enqueue, not a guard: the look is atomic
    "QUEUED_STALE_SECONDS": Env("NRLLM_QUEUED_STALE_SECONDS", float, 30.0),
    # how often a process using the in-process executor sweeps by itself (0: never)
    "QUEUED_SWEEP_SECONDS": Env("NRLLM_QUEUED_SWEEP_SECONDS", float, 60.0),
    # what a message to a thread does while a run of the thread is active, when it names no
    # strategy: "reject", "enqueue", "interrupt" or "rollback" (threads.py)
    "THREAD_MULTITASK_STRATEGY": Env("NRLLM_THREAD_MULTITASK_STRATEGY", str, "enqueue"),
    # hot statements (step boundary, cancel, claim) as server-side prepared statements on
    # PostgreSQL; turn off behind a transaction-mode PgBouncer older than 1.21 (or without
    # max_prepared_statements): they are then still server-side bound, only not prepared
    "PREPARED_STATEMENTS": Env("NRLLM_PREPARED_STATEMENTS", bool, True),
    # the browser stream (GET /api/runs/<id>/stream/): how often it reads the stored stream,
    # how long it may stay silent before a keepalive comment, and when it closes so the
    # client reconnects with Last-Event-ID (bounds how long one stream holds a worker thread)
    "STREAM_POLL_SECONDS": Env("NRLLM_STREAM_POLL_SECONDS", float, 0.2),
    "STREAM_HEARTBEAT_SECONDS": Env("NRLLM_STREAM_HEARTBEAT_SECONDS", float, 10.0),
    "STREAM_MAX_SECONDS": Env("NRLLM_STREAM_MAX_SECONDS", float, 300.0),
    # on PostgreSQL, wake watchers by LISTEN/NOTIFY instead of polling (off: poll as on SQLite)
    "STREAM_PUSH": Env("NRLLM_STREAM_PUSH", bool, True),
    # open streams allowed per user and per process (0: unlimited); past them a new one gets 429.
    # Each holds a server thread: None (the default) is half the server's threads when they are
    # known, else 16 (admission/capacity.py); a check warns when a number set exceeds them
    "STREAM_MAX_PER_USER": Env("NRLLM_STREAM_MAX_PER_USER", int, 6),
    "STREAM_MAX_OPEN": Env("NRLLM_STREAM_MAX_OPEN", int, None),
    # the request threads of one server process (0: read gunicorn's own ``threads`` when the
    # process is gunicorn, else not known)
    "SERVER_THREADS": Env("NRLLM_SERVER_THREADS", int, 0),
    # the model's words as they stream: pieces arriving within this window go out together
    "DELTA_COALESCE_SECONDS": Env("NRLLM_DELTA_COALESCE_SECONDS", float, 0.05),
    # the least time between two notifying commits of one process's publisher (deltas.py):
    # bounds what watched runs cost PostgreSQL's global notify lock, whatever their step rate
    "PUSH_INTERVAL_SECONDS": Env("NRLLM_PUSH_INTERVAL_SECONDS", float, 0.02),
    # how often a process re-reads the status of the runs it executes, in one query, when no
    # cancel notification can reach it (SQLite; a PostgreSQL listening connection that is lost)
    "CANCEL_POLL_SECONDS": Env("NRLLM_CANCEL_POLL_SECONDS", float, 1.0),
    # GET /metrics: staff may always read it; with a token, so may ``Authorization: Bearer <token>``;
    # ALLOW_LOCALHOST also opens it to loopback clients (unsafe behind a reverse proxy on this host)
    "METRICS_TOKEN": Env("NRLLM_METRICS_TOKEN", str, ""),
    "METRICS_ALLOW_LOCALHOST": Env("NRLLM_METRICS_ALLOW_LOCALHOST", bool, False),
    # how long the run-state gauges (one GROUP BY over active runs) are reused between scrapes
    "METRICS_STATE_TTL": Env("NRLLM_METRICS_STATE_TTL", float, 5.0),
}


# Settings renamed in 0.5, still read (under their old names, and their old environment
# variables) for one release; ``manage.py check`` warns where one is used (nrllm_agents.W011).
RENAMED: dict[str, str] = {"OPENAI_TIMEOUT": "PROVIDER_TIMEOUT", "OPENAI_STREAM": "PROVIDER_STREAM"}
RENAMED_ENV: dict[str, str] = {"NRLLM_PROVIDER_STREAM": "NRLLM_OPENAI_STREAM"}


def renamed_in_use() -> list[tuple[str, str]]:
    """The ``(old, new)`` names of renamed settings or environment variables this process sets."""
    user = getattr(django_settings, "NRLLM_AGENTS", {}) or {}
    used = [(old, new) for old, new in RENAMED.items() if isinstance(user, dict) and old in user]
    return used + [(old, new) for new, old in RENAMED_ENV.items() if old in os.environ]


class _Settings:
    """Attribute access to the merged settings; nothing is read before first use."""

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(name)
        user = getattr(django_settings, "NRLLM_AGENTS", {}) or {}
        old = next((o for o, new in RENAMED.items() if new == name), None)
        value = user.get(name, user.get(old, DEFAULTS[name]) if old else DEFAULTS[name])
        if isinstance(value, Env) and value.name in RENAMED_ENV and value.name not in os.environ:
            value = Env(RENAMED_ENV[value.name], value.kind, value.default)
        if isinstance(value, Env):
            value = value.resolve()
        if name in ("PROVIDERS", "TOOLS") and isinstance(value, dict):
            value = {**DEFAULTS[name], **value}  # adds to the built-in ones
        return value


app_settings = _Settings()
