"""What a caller asks for: a validated, storable run request."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.utils import timezone

from ..access import policy
from ..conf import app_settings
from ..domain import ConfigurationError
from ..domain.errors import Kind, KindedError
from ..domain.jsonlimits import DEPTH_ERROR, MAX_VALUE_BYTES, SIZE_ERROR, value_too_deep, value_too_large
from ..domain.providers import validate_script
from ..domain.steps import decimal_text
from ..mcp import catalog as mcp_catalog
from ..money import parsing

MAX_PROMPT_CHARS = 20_000

# The names of the typed tools the installed apps offer (``catalog.app_tools``), handed in by the
# app's ready(): this floor sits below the catalog, which finds them.
app_tool_names: Callable[[], Collection[str]] = frozenset
MAX_SCRIPT_BYTES = MAX_VALUE_BYTES  # the script as compact JSON; at most max_iterations + 1 turns can play


UNSTORABLE = "must not contain NUL or lone surrogate characters"


def unstorable(value: Any) -> bool:
    """True when a JSON-like value holds text the database cannot store (NUL, lone surrogates).

    An iterative walk: no nesting depth can exhaust the stack.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item or any("\ud800" <= ch <= "\udfff" for ch in item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return False


class InvalidRequest(KindedError, ValueError):
    """The run request is invalid; ``errors`` maps each field to what is wrong with it."""

    kind = Kind.INVALID

    def __init__(self, errors: Mapping[str, str]) -> None:
        self.errors = dict(errors)
        super().__init__("; ".join(f"{k}: {v}" for k, v in self.errors.items()) or "invalid request")


@dataclass(frozen=True)
class RunRequest:
    """A run request. Build it with ``RunRequest.from_mapping`` to validate untrusted input."""

    prompt: str
    provider: str = "scripted"
    model: str = ""
    tools: tuple[str, ...] = ()
    max_iterations: int = 10
    script: list[dict[str, Any]] | None = None
    system: str | None = None
    on_deny: str = "continue"
    deadline_seconds: int | None = None
    max_total_tokens: int | None = None
    connection: str | None = None  # a Connection's name (never its key): it sets the provider kind
    max_cost: Decimal | None = None  # in NRLLM_AGENTS["CURRENCY"]
    agents: tuple[str, ...] = ()  # saved agents offered to the model as tools (sub-agents: runtime.trees)
    agent: str | None = None  # an Agent's name: its definition fills every field the request leaves out
    agent_version: int | None = None  # the version used (the latest when the request names none)
    # The version's row id and snapshot, for the run's record; not part of the request itself.
    agent_record: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, viewer: Any = None) -> RunRequest:
        """Validate untrusted input; raises ``InvalidRequest`` listing every bad field.

        ``viewer``: the signed-in caller, when a surface asks for one; a refusal lists the valid
        names only of what the policy lets it see (the connections' names: never without one).
        """
        errors: dict[str, str] = {}
        if not isinstance(data, Mapping):
            raise InvalidRequest({"non_field_errors": "expected an object"})
        known = {f.name for f in dataclasses.fields(cls)} - {"agent_record"}
        unknown = sorted(set(data) - known)
        if unknown:
            errors["non_field_errors"] = f"unknown fields: {', '.join(map(str, unknown))}"
        data, agent = _with_agent(data, errors)

        prompt = data.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            errors["prompt"] = "a non-empty string is required"
        elif len(prompt) > MAX_PROMPT_CHARS:
            errors["prompt"] = f"at most {MAX_PROMPT_CHARS} characters"

        connection, kind, default_model = _connection(data.get("connection"), errors, viewer)
        provider = data.get("provider") or kind or app_settings.DEFAULT_PROVIDER
        if kind is not None:
            if provider != kind:
                errors["provider"] = f"the connection speaks {kind}; leave the provider out"
        elif not isinstance(provider, str) or provider not in app_settings.PROVIDERS:
            errors["provider"] = f"unknown provider; one of {', '.join(sorted(app_settings.PROVIDERS))}"

        model = data.get("model") or default_model or ""
        if not isinstance(model, str) or len(model) > 200:
            errors["model"] = "a string of at most 200 characters"
        elif connection is not None and not model:
            errors["model"] = "the connection has no default model; name one"
        elif provider == "openai" and not model:
            errors["model"] = "the openai provider needs a model name"
        elif not model:  # stored on the run: the model it ran with, even when the caller named none
            model = {"anthropic": app_settings.ANTHROPIC_MODEL, "gemini": app_settings.GEMINI_MODEL}.get(provider, "")

        tools = data.get("tools")
        if tools is None:
            tools = list(app_settings.DEFAULT_TOOLS)
        if not isinstance(tools, (list, tuple)) or not all(isinstance(t, str) for t in tools):
            errors["tools"] = "a list of tool names"
            tools = []
        else:
            refusal = _unknown_tools(tools)
            if refusal:
                errors["tools"] = refusal

        agents = _sub_agents(data.get("agents"), tools, errors)

        limit = app_settings.MAX_ITERATIONS_LIMIT
        max_iterations = data.get("max_iterations")
        if max_iterations is None:
            max_iterations = app_settings.DEFAULT_MAX_ITERATIONS
        if isinstance(max_iterations, bool) or not isinstance(max_iterations, int) or not 1 <= max_iterations <= limit:
            errors["max_iterations"] = f"an integer from 1 to {limit}"

        script = data.get("script")
        if script is not None:
            if provider != "scripted":
                errors["script"] = "only the scripted provider takes a script"
            elif value_too_deep(script):
                errors["script"] = DEPTH_ERROR
            elif isinstance(script, list) and "max_iterations" not in errors and len(script) > max_iterations + 1:
                errors["script"] = (
                    f"at most {max_iterations + 1} turns (max_iterations + 1): later turns could never play"
                )
            elif value_too_large(script):
                errors["script"] = SIZE_ERROR
            else:
                try:
                    script = validate_script(script)
                except ConfigurationError as exc:
                    errors["script"] = str(exc)

        system = data.get("system")
        if system is not None and (not isinstance(system, str) or len(system) > MAX_PROMPT_CHARS):
            errors["system"] = f"a string of at most {MAX_PROMPT_CHARS} characters"

        on_deny = data.get("on_deny") or "continue"
        if on_deny not in ("continue", "stop"):
            errors["on_deny"] = "'continue' or 'stop'"

        limits = {
            name: _limit(data, name, default, bound, errors)
            for name, default, bound in (
                ("deadline_seconds", app_settings.DEFAULT_DEADLINE_SECONDS, app_settings.DEADLINE_SECONDS_LIMIT),
                ("max_total_tokens", app_settings.DEFAULT_MAX_TOTAL_TOKENS, app_settings.MAX_TOTAL_TOKENS_LIMIT),
            )
        }

        max_cost = _money(data, "max_cost", app_settings.DEFAULT_MAX_COST, app_settings.MAX_COST_LIMIT, errors)

        # PostgreSQL cannot store NUL or lone surrogates (text, jsonb): refuse them here, for
        # every surface, rather than fail later with a server error.
        for key, value in data.items():
            if key != "script" and value_too_deep(value):
                errors[key if isinstance(key, str) and not unstorable(key) else "non_field_errors"] = DEPTH_ERROR
            elif unstorable(key) or unstorable(value):
                errors[key if isinstance(key, str) and not unstorable(key) else "non_field_errors"] = UNSTORABLE
        if errors:
            raise InvalidRequest(errors)
        assert isinstance(prompt, str)  # or errors["prompt"] was raised above
        return cls(
            prompt=prompt,
            provider=provider,
            model=model,
            tools=tuple(dict.fromkeys(tools)),
            agents=agents,
            max_iterations=max_iterations,
            script=script,
            system=system,
            on_deny=on_deny,
            connection=connection,
            max_cost=max_cost,
            agent=agent["name"] if agent else None,
            agent_version=agent["version"] if agent else None,
            agent_record=agent,
            **limits,
        )

    def as_dict(self) -> dict[str, Any]:
        """The JSON form stored on queued runs and accepted back by ``from_mapping``."""
        data: dict[str, Any] = {
            "prompt": self.prompt,
            "provider": self.provider,
            "model": self.model,
            "tools": list(self.tools),
            "max_iterations": self.max_iterations,
            "on_deny": self.on_deny,
        }
        if self.script is not None:
            data["script"] = self.script
        if self.agents:
            data["agents"] = list(self.agents)
        if self.system is not None:
            data["system"] = self.system
        data["deadline_seconds"] = self.deadline_seconds  # None stays None: "no limit", not "the default"
        data["max_total_tokens"] = self.max_total_tokens
        data["max_cost"] = None if self.max_cost is None else decimal_text(self.max_cost)
        if self.connection is not None:
            data["connection"] = self.connection
        if self.agent is not None:
            data["agent"], data["agent_version"] = self.agent, self.agent_version
        return data

    def row_fields(self) -> dict[str, Any]:
        """The columns of ``AgentRun`` that describe this request."""
        options: dict[str, Any] = {"max_iterations": self.max_iterations, "on_deny": self.on_deny}
        if self.script is not None:
            options["script"] = self.script
        if self.agents:
            options["agents"] = list(self.agents)
        if self.system is not None:
            options["system"] = self.system
        deadline_at = None
        if self.deadline_seconds is not None:  # the clock starts when the run is created
            deadline_at = timezone.now() + timedelta(seconds=self.deadline_seconds)
        return {
            "prompt": self.prompt,
            "provider": self.provider,
            "model": self.model,
            "tools": list(self.tools),
            "options": options,
            "deadline_seconds": self.deadline_seconds,
            "max_total_tokens": self.max_total_tokens,
            "max_cost": self.max_cost,
            "connection": self.connection or "",
            "deadline_at": deadline_at,
            "agent_version_id": self.agent_record["id"] if self.agent_record else None,
            "agent_snapshot": {k: v for k, v in self.agent_record.items() if k not in ("id", "agent_id")}
            if self.agent_record
            else None,
        }

    @classmethod
    def from_row(cls, run: Any) -> RunRequest:
        """Rehydrate from a run's stored columns (used to resume after approval)."""
        return cls.from_mapping(
            {
                "prompt": run.prompt,
                "provider": run.provider,
                "model": run.model,
                "tools": list(run.tools),
                **(run.options or {}),
                "deadline_seconds": run.deadline_seconds,
                "max_total_tokens": run.max_total_tokens,
                "max_cost": None if run.max_cost is None else decimal_text(run.max_cost),
                **({"connection": run.connection} if run.connection else {}),
                **_agent_of(run),
            }
        )


def _limit(data: Mapping[str, Any], name: str, default: Any, bound: Any, errors: dict[str, str]) -> int | None:
    """A limit from the request: absent means the configured default, ``None`` means no limit."""
    value = data[name] if name in data else default
    if value is None:
        return None
    bound = int(bound)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= bound:
        errors[name] = f"an integer from 1 to {bound}"
        return None
    return value


def _unknown_tools(tools: list[str] | tuple[str, ...]) -> str:
    """Why some of ``tools`` cannot be offered (empty: all can): exactly what ``/api/tools/``
    lists is accepted, the settings' tools, the apps' typed ones and the MCP catalog's
    (``mcp.catalog.current``)."""
    known = {*app_settings.TOOLS, *app_tool_names()}
    missing = [t for t in tools if t not in known]
    if not missing:
        return ""
    listing = mcp_catalog.current() if mcp_catalog.configured() else mcp_catalog.Catalog()
    missing = [t for t in dict.fromkeys(missing) if t not in listing.tools]
    if not missing:
        return ""
    named = ", ".join(t[:80] for t in missing[:10])
    available = ", ".join(sorted({*known, *listing.tools}))
    broken = "".join(
        f"; MCP server {name!r} is unavailable" for name in sorted(listing.broken) if name != mcp_catalog.CONFIGURATION
    )
    return f"unknown tools: {named}; available: {available}{broken}"


def _connection(name: Any, errors: dict[str, str], viewer: Any = None) -> tuple[str | None, str | None, str]:
    """``(name, kind, default model)`` of the named connection; ``(None, None, "")`` for none.

    The names of the others are listed only to a ``viewer`` the policy lets see connections.
    """
    if name is None or name == "":
        return None, None, ""
    from ..models import Connection

    row = None
    if isinstance(name, str) and len(name) <= 100 and not unstorable(name):
        row = Connection.objects.filter(name=name).values("kind", "default_model").first()
    if row is None:
        errors["connection"] = "unknown connection"
        if viewer is not None and policy.may_configure(viewer, policy.Setup.VIEW, "connection"):
            known = list(Connection.objects.values_list("name", flat=True)[:20])
            errors["connection"] += f"; one of {', '.join(known)}" if known else "; none is set up"
        return None, None, ""
    return name, row["kind"], row["default_model"]


def _money(data: Mapping[str, Any], name: str, default: Any, bound: Any, errors: dict[str, str]) -> Decimal | None:
    """A money limit: a plain decimal (``money.parsing``) above 0, at most ``bound``; ``None``: no limit."""
    value = data[name] if name in data else default
    if value is None:
        return None
    try:
        return parsing.parse(value, parsing.cost_limit(bound))
    except parsing.InvalidAmount as exc:
        errors[name] = str(exc)
        return None


def _sub_agents(value: Any, tools: Any, errors: dict[str, str]) -> tuple[str, ...]:
    """The saved agents a run offers as tools: existing agents' names, none also a tool's name."""
    if value is None or value == [] or value == ():
        return ()
    if not isinstance(value, (list, tuple)) or not all(isinstance(a, str) and len(a) <= 100 for a in value):
        errors["agents"] = "a list of saved agents' names"
        return ()
    from ..models import Agent

    names = tuple(dict.fromkeys(value))
    known = set(Agent.objects.filter(name__in=names).values_list("name", flat=True))
    missing = [a for a in names if a not in known]
    clash = [a for a in names if isinstance(tools, (list, tuple)) and a in tools]
    if missing:
        errors["agents"] = f"no such agent: {', '.join(missing[:10])}"
    elif clash:
        errors["agents"] = f"also a tool's name: {', '.join(clash[:10])}"
    return names


AGENT_FIELDS = (
    "system",
    "agents",
    "script",
    "connection",
    "provider",
    "model",
    "tools",
    "max_iterations",
    "on_deny",
    "deadline_seconds",
    "max_total_tokens",
    "max_cost",
)
"""The request fields an agent's definition may set."""


def _with_agent(data: Mapping[str, Any], errors: dict[str, str]) -> tuple[Mapping[str, Any], dict[str, Any] | None]:
    """The request with its agent's definition under it (the request's own fields win), and the
    agent version's record (``{"id", "agent_id", "name", "version", "definition"}``: ``id`` is the
    version's, ``agent_id`` the agent's); unchanged without an agent.

    A request that names its own provider or connection takes none of the agent's (nor its
    model, unless it names none either).
    """
    name, version = data.get("agent"), data.get("agent_version")
    if name is None:
        if version is not None:
            errors["agent_version"] = "goes with agent"
        return data, None
    from ..models import AgentVersion

    found = None
    if isinstance(name, str) and len(name) <= 100 and not unstorable(name):
        versions = AgentVersion.objects.select_related("agent").filter(agent__name=name)
        if version is None:
            found = versions.order_by("-version").first()
        elif isinstance(version, int) and not isinstance(version, bool) and 0 < version < 2**31:
            found = versions.filter(version=version).first()
    if found is None:
        field = "agent_version" if version is not None and isinstance(name, str) else "agent"
        errors[field] = "no such agent" if field == "agent" else "no such version of this agent"
        return data, None
    definition = {k: v for k, v in (found.definition or {}).items() if k in AGENT_FIELDS}
    if "provider" in data or "connection" in data:
        definition.pop("provider", None)
        definition.pop("connection", None)
        if "model" not in data:
            definition.pop("model", None)
    record = {"id": found.pk, "agent_id": found.agent_id, **found.snapshot()}
    return {**definition, **data}, record


def _agent_of(run: Any) -> dict[str, Any]:
    """The agent fields a stored run was started with (the exact version)."""
    snapshot = run.agent_snapshot or {}
    if not snapshot.get("name") or getattr(run, "agent_version_id", None) is None:
        return {}  # a deleted agent: the run's own columns still hold everything it ran with
    return {"agent": snapshot["name"], "agent_version": snapshot.get("version")}
