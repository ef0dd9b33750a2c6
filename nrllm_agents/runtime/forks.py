"""Forks: a new run that continues a stopped run from one of its steps.

The fork's transcript is its parent's up to and including step N, rebuilt from the stored
stream, with an explicit answer for every tool call that has none (``domain.fork``). Its
first step (``forked``) records the parent, N and the copied messages, so the fork's own
stream rebuilds its state (a worker that continues it never reads the parent). The parent
is only read, never written. ``AgentRuntime.fork`` executes the plan made here.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..conf import app_settings
from ..domain import Step, StepKind
from ..domain.errors import Kind, KindedError
from ..domain.fork import fork_payload
from ..models import TERMINAL, AgentRun
from ..presentation.outcomes import RunNotFound
from ..presentation.presenters import event_dict
from ..store.journal import MAX_SEQUENCE
from ..validation.run_request import InvalidRequest, RunRequest

OVERRIDABLE = (
    "script",
    "tools",
    "max_iterations",
    "provider",
    "model",
    "deadline_seconds",
    "max_total_tokens",
    "connection",
    "max_cost",
    "agent",
)


class NotForkable(KindedError, RuntimeError):
    """The run cannot be forked as it is (``ParentStillActive``, ``ParentPurged``)."""

    kind = Kind.CONFLICT


class ParentStillActive(NotForkable):
    """The run is still queued, running or waiting: fork it once it has stopped."""

    def subject(self) -> dict[str, Any]:
        return {"run_id": str(self.run_id), "status": self.status}

    def detail(self) -> str:
        return f"The run is {self.status}; only a stopped run can be forked."

    def sentence(self) -> str:
        return f"The run is {self.status}; stop it first."

    def __init__(self, run_id: Any, status: str) -> None:
        super().__init__(f"run {run_id} is {status}; only a stopped run (cancelled, failed, completed) can be forked")
        self.run_id = run_id
        self.status = status


class ParentPurged(NotForkable):
    """The run's content was purged by the retention policy: nothing is left to continue from."""

    def subject(self) -> dict[str, Any]:
        return {"run_id": str(self.run_id), "purged_at": self.purged_at.isoformat()}

    def detail(self) -> str:
        return f"The run's content was purged on {self.purged_at:%Y-%m-%d}; it cannot be forked."

    def sentence(self) -> str:
        return f"Its content was purged on {self.purged_at:%Y-%m-%d} (retention); start a new run."

    def __init__(self, run_id: Any, purged_at: datetime) -> None:
        super().__init__(
            f"run {run_id}'s content was purged on {purged_at:%Y-%m-%d} (retention): "
            "there is no transcript left to fork; start a new run"
        )
        self.run_id = run_id
        self.purged_at = purged_at


@dataclass(frozen=True)
class ForkPlan:
    """What a fork will be: its request, its lineage columns and its first (``forked``) step."""

    parent_id: uuid.UUID
    from_sequence: int
    request: RunRequest
    step: Step

    @property
    def lineage(self) -> dict[str, Any]:
        return {"parent_id": self.parent_id, "forked_from_sequence": self.from_sequence}


def default_sequence(kinds: list[tuple[int, str]]) -> int | None:
    """The default fork point: the last step before the ``cancelled`` step (else the last step)."""
    steps = [seq for seq, kind in kinds if kind != StepKind.CANCELLED]
    return steps[-1] if steps else None


def _sequence(value: Any, stream: list[tuple[int, str]]) -> int:
    if value is None:
        found = default_sequence(stream)
        if found is None:
            raise InvalidRequest({"from_sequence": "the run recorded no step to continue from; start a new run"})
        return found
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEQUENCE:
        raise InvalidRequest({"from_sequence": "a step sequence: an integer from 0"})
    if not stream or value > stream[-1][0]:
        last = f"0 to {stream[-1][0]}" if stream else "none"
        raise InvalidRequest({"from_sequence": f"no step {value} in the run's stream (its steps: {last})"})
    return value


def provider_of(parent: AgentRun, overrides: Mapping[str, Any]) -> str:
    """The provider a fork of ``parent`` with ``overrides`` would run on (as ``_request`` builds it)."""
    chosen = (
        overrides.get("provider") if isinstance(overrides, Mapping) and "provider" in overrides else parent.provider
    )
    if not isinstance(chosen, str):
        return ""  # not a name: the request's validation says so
    return chosen or app_settings.DEFAULT_PROVIDER


def _request(parent: AgentRun, overrides: Mapping[str, Any], played: int, answered: bool) -> RunRequest:
    """The fork's request: the parent's, with ``overrides``. A scripted run plays its own script
    from its first turn; a fork that keeps its parent's script continues it, so it gets the
    turns the parent had not played by the fork point (``played`` model calls). ``answered``:
    the copied transcript already ends with the model's final answer (no turn is needed)."""
    if not isinstance(overrides, Mapping):
        raise InvalidRequest({"non_field_errors": "overrides must be an object"})
    unknown = sorted(set(overrides) - set(OVERRIDABLE))
    if unknown:
        raise InvalidRequest(
            {
                "non_field_errors": f"cannot override: {', '.join(map(str, unknown))}; "
                f"a fork may override {', '.join(OVERRIDABLE)}"
            }
        )
    base: dict[str, Any] = {
        "prompt": parent.prompt,
        "provider": parent.provider,
        "model": parent.model,
        "tools": list(parent.tools or []),
        **(parent.options or {}),
        "deadline_seconds": parent.deadline_seconds,
        "max_total_tokens": parent.max_total_tokens,
        "max_cost": parent.max_cost,
        "connection": parent.connection or None,
    }
    if "provider" in overrides or "connection" in overrides:
        # Another provider or connection: the parent's connection does not follow.
        base.pop("connection")
        if "connection" in overrides:
            base.pop("provider")
            if "model" not in overrides:
                base["model"] = ""  # the new connection's default model
    if "agent" in overrides:
        # Started from an agent: its definition, not the parent's settings, fills what the
        # overrides leave out (its instructions excepted: the copied transcript has the parent's).
        base = {"prompt": parent.prompt}
    elif parent.agent_snapshot and parent.agent_version_id is not None:  # the version still exists
        base.update(agent=parent.agent_snapshot["name"], agent_version=parent.agent_snapshot["version"])
    base.pop("system", None)  # already part of the copied transcript
    if "script" not in overrides and base.get("script") is not None:
        if overrides.get("provider", base.get("provider")) != "scripted":
            base.pop("script")  # the parent's script does not go to another provider
        elif isinstance(base["script"], list):
            rest = base["script"][played:]
            if rest:
                base["script"] = rest
            elif not answered:
                raise InvalidRequest(
                    {"script": "the parent's script has no turn left at this step; give the fork a script of its own"}
                )
    return RunRequest.from_mapping({**base, **overrides})


def plan(parent_id: uuid.UUID, from_sequence: Any = None, overrides: Mapping[str, Any] | None = None) -> ForkPlan:
    """Plan a fork of a stopped run from step ``from_sequence`` (default: the last before the stop).

    Raises ``RunNotFound``; ``ParentStillActive`` for a run that has not stopped;
    ``ParentPurged`` for a run whose content the retention policy purged;
    ``InvalidRequest`` for a malformed or out-of-stream ``from_sequence`` (field
    ``from_sequence``) or a bad override. Reads the parent only.
    """
    parent = AgentRun.objects.filter(pk=parent_id).first()
    if parent is None:
        raise RunNotFound(parent_id)
    if parent.status not in TERMINAL:
        raise ParentStillActive(parent.pk, parent.status)
    if parent.purged_at is not None:
        raise ParentPurged(parent.pk, parent.purged_at)
    events = list(parent.events.order_by("sequence"))
    sequence = _sequence(from_sequence, [(e.sequence, e.kind) for e in events])
    payload, round_ = fork_payload(
        [event_dict(e) for e in events], from_sequence=sequence, parent_id=str(parent.pk), parent_status=parent.status
    )
    played = sum(1 for e in events if e.kind == StepKind.LLM and e.sequence <= sequence)
    last = (payload.get("messages") or [{}])[-1]
    answered = last.get("role") == "assistant" and not last.get("tool_calls")
    request = _request(parent, overrides or {}, played, answered)
    return ForkPlan(parent.pk, sequence, request, Step(StepKind.FORKED, round_, payload))
