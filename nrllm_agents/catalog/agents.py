"""Agents: named, versioned definitions that runs and forks start from.

A definition holds run request fields (``run_request.AGENT_FIELDS``: the instructions, a
connection or provider and a model, the tools, the limits) and is validated exactly as a run
request is. Saving a definition adds a version; no version is ever changed, so a run's record
of the version it ran (``AgentRun.agent_version`` and ``agent_snapshot``) stays true. Every
surface (admin, API) goes through here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Max

from ..access import policy
from ..conf import app_settings
from ..models import Agent, AgentVersion
from ..validation.run_request import AGENT_FIELDS, InvalidRequest, RunRequest

MAX_DESCRIPTION_CHARS = 2000


class InvalidAgent(ValueError):
    """An agent could not be saved; ``errors`` maps each field to what is wrong with it."""

    def __init__(self, errors: Mapping[str, str]) -> None:
        self.errors = dict(errors)
        super().__init__("; ".join(f"{k}: {v}" for k, v in self.errors.items()))


def validated(definition: Any) -> dict[str, Any]:
    """The definition as it will be stored: only the fields it sets, each checked like a run
    request's (an unknown connection, tool or provider, a limit out of bounds are refused), and
    no test double that production refuses to run (``policy.provider_refusal``)."""
    if not isinstance(definition, Mapping):
        raise InvalidAgent({"definition": "an object of run request fields"})
    unknown = sorted(set(map(str, definition)) - set(AGENT_FIELDS))
    if unknown:
        raise InvalidAgent(
            {"definition": f"unknown fields: {', '.join(unknown)}; an agent sets {', '.join(AGENT_FIELDS)}"}
        )
    try:
        request = RunRequest.from_mapping({"prompt": "(agent definition)", **definition})
    except InvalidRequest as exc:
        raise InvalidAgent({f"definition.{k}": v for k, v in exc.errors.items()}) from None
    refusal = policy.provider_refusal(request.provider) if "provider" in definition else None
    if refusal is not None:
        raise InvalidAgent({"definition.provider": refusal})
    stored = request.as_dict()
    return {k: stored.get(k) for k in AGENT_FIELDS if k in definition}


def save(
    name: str, definition: Any, *, description: str | None = None, by: Any = None, create: bool | None = None
) -> AgentVersion:
    """Add a version of agent ``name`` (creating the agent when ``create`` allows; ``None``:
    either). Raises ``InvalidAgent``; a definition equal to the latest adds no version."""
    clean = validated(definition)
    if description is not None and (not isinstance(description, str) or len(description) > MAX_DESCRIPTION_CHARS):
        raise InvalidAgent({"description": f"a string of at most {MAX_DESCRIPTION_CHARS} characters"})
    with transaction.atomic():
        if clean.get("agents"):  # only a save naming sub-agents can close a cycle
            _serialize_tree_checks()
        _check_tree(name, clean)
        agent = Agent.objects.select_for_update().filter(name=name).first()
        if agent is None and create is False:
            raise InvalidAgent({"name": f"no agent named {name!r}"})
        if agent is not None and create is True:
            raise InvalidAgent({"name": f"an agent named {name!r} exists; edit it to add a version"})
        if agent is None:
            agent = Agent(name=name, description=description or "")
            try:
                agent.full_clean()
                agent.save()
            except IntegrityError:
                raise InvalidAgent({"name": f"an agent named {name!r} exists"}) from None
            except Exception as exc:  # ValidationError: the name is not a slug
                raise InvalidAgent({"name": " ".join(getattr(exc, "messages", ["invalid"]))}) from None
        elif description is not None and description != agent.description:
            agent.description = description
            agent.save(update_fields=["description", "updated_at"])
        latest = agent.versions.order_by("-version").first()
        if latest is not None and latest.definition == clean:
            return latest
        number = (agent.versions.aggregate(top=Max("version"))["top"] or 0) + 1
        owner = by if getattr(by, "pk", None) is not None else None
        return AgentVersion.objects.create(agent=agent, version=number, definition=clean, created_by=owner)


TREE_LOCK = 0x6E726C6C6D747265  # "nrllmtre": the advisory lock of the sub-agent graph


def _serialize_tree_checks() -> None:
    """Hold the lock of the sub-agent graph to the end of the transaction, so that two saves
    whose checks each pass alone (A calls B, B calls A) run one after the other and the second
    sees the first. PostgreSQL: a transaction-level advisory lock; SQLite's ``IMMEDIATE``
    transaction already holds the database's write lock from its start."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", [TREE_LOCK])


def _check_tree(name: str, definition: Mapping[str, Any]) -> None:
    """Refuse a definition whose sub-agents (``agents``, followed through their latest versions)
    call back into it, or reach deeper than ``MAX_TREE_DEPTH`` below it (the error names the
    real depth). Each agent is read once, however many paths reach it."""
    limit = int(app_settings.MAX_TREE_DEPTH)
    depths: dict[str, int] = {}

    def below(agent: str, seen: tuple[str, ...]) -> int:
        """How many levels of sub-agents ``agent`` has under it."""
        if agent in seen:
            raise InvalidAgent({"definition.agents": f"calls itself again: {' -> '.join((*seen, agent))}"})
        if agent not in depths:
            if agent == name:
                subs = list(definition.get("agents") or [])
            else:
                version = AgentVersion.objects.filter(agent__name=agent).order_by("-version").first()
                subs = list((version.definition if version else {}).get("agents") or [])
            depths[agent] = max((1 + below(sub, (*seen, agent)) for sub in subs), default=0)
        return depths[agent]

    depth = below(name, ())
    if depth > limit:
        raise InvalidAgent({"definition.agents": f"sub-agents {depth} levels deep; at most {limit} (MAX_TREE_DEPTH)"})


def public_dict(agent: Agent, *, versions: bool = False) -> dict[str, Any]:
    """An agent as the API shows it: its latest definition (and, with ``versions``, them all)."""
    rows = list(agent.versions.order_by("-version"))
    latest = rows[0] if rows else None
    data: dict[str, Any] = {
        "name": agent.name,
        "description": agent.description,
        "version": latest.version if latest else None,
        "definition": latest.definition if latest else {},
        "updated_at": agent.updated_at.isoformat(),
    }
    if versions:
        data["versions"] = [
            {
                "version": v.version,
                "definition": v.definition,
                "created_at": v.created_at.isoformat(),
                "created_by": v.created_by.get_username() if v.created_by is not None else None,
            }
            for v in rows
        ]
    return data
