"""A ``RunCreate`` body, checked: what run to start (a ``RunRequest``), how (the multitask
strategy, ``if_not_exists``), what to stream, or which decision resumes a waiting run.

Every problem is an ``InvalidRequest`` (answered 422) naming the field. Options of LangGraph's
own server that change nothing here (durability, subgraphs, feedback keys, tracing) are
accepted and ignored; options that would change what runs and that we do not have (node
breakpoints, checkpoints, webhooks, delays) are refused rather than silently dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..domain import jsonlimits
from ..runtime.threads import STRATEGIES
from ..store.results import reason_problem
from ..validation.run_request import InvalidRequest, RunRequest
from .messages import prompt_of

# Every mode the SDKs send: ``Translator`` maps each to what a run has (``tasks``,
# ``checkpoints`` and ``debug`` from its steps); ``custom``, ``tools`` and ``lifecycle`` stream
# nothing here (no custom writes, tool events or subgraphs), but are never refused.
STREAM_MODES = (
    "values",
    "updates",
    "messages",
    "messages-tuple",
    "events",
    "tasks",
    "checkpoints",
    "debug",
    "custom",
    "tools",
    "lifecycle",
)
IGNORED = {
    "stream_subgraphs",
    "stream_resumable",
    "feedback_keys",
    "checkpoint_during",
    "durability",
    "on_completion",
    "langsmith_tracer",
    "strict_resume",
}
REFUSED = {"interrupt_before", "interrupt_after", "webhook", "after_seconds"}
KNOWN = {"assistant_id", "input", "command", "config", "context", "metadata", "stream_mode", "multitask_strategy"}
KNOWN |= {"if_not_exists", "on_disconnect", "checkpoint", "checkpoint_id"} | IGNORED | REFUSED
# The run's own fields a client may set through ``context`` (or ``config.configurable``).
RUN_FIELDS = {
    "provider",
    "model",
    "tools",
    "max_iterations",
    "script",
    "system",
    "on_deny",
    "deadline_seconds",
    "max_total_tokens",
    "connection",
    "max_cost",
}


@dataclass(frozen=True)
class RunCreate:
    """A checked ``RunCreate``: either ``request`` (a new message) or ``resume`` (a decision)."""

    assistant_id: str
    request: RunRequest | None
    resume: bool | None
    strategy: str | None
    if_not_exists: str
    stream_modes: tuple[str, ...]
    metadata: dict[str, Any] = field(default_factory=dict)
    reason: str = ""  # why the human decided as they did (a resume's)
    cancel_on_disconnect: bool = False  # ``on_disconnect="cancel"``: a stream's client leaving cancels the run
    checkpoint_id: str | None = None  # the checkpoint the client starts from: only the thread's latest is allowed
    happened: bool | None = None  # a resume of a call in doubt: whether it happened (then ``result`` is its result)
    result: Any = None


def _mapping(data: Mapping[str, Any], name: str) -> dict[str, Any]:
    value = data.get(name)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidRequest({name: "expected an object"})
    return dict(value)


def metadata_of(data: Mapping[str, Any]) -> dict[str, Any]:
    """A body's ``metadata`` (a run's, a thread's; ``{}`` when it has none), within
    ``jsonlimits.MAX_VALUE_BYTES``: what is kept is returned by every later read."""
    return checked_metadata(_mapping(data, "metadata"))


def checked_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """``metadata`` as it is to be kept (a merge's result too), or ``InvalidRequest`` (422)."""
    if jsonlimits.value_too_large(metadata):
        raise InvalidRequest({"metadata": jsonlimits.SIZE_ERROR})
    return metadata


def stream_modes(value: Any) -> tuple[str, ...]:
    """``stream_mode`` (a mode or a list of them; default ``values``) as a tuple."""
    modes = [value] if isinstance(value, str) else value
    if value is None:
        modes = ["values"]
    if not isinstance(modes, list) or not modes or not all(isinstance(m, str) and m in STREAM_MODES for m in modes):
        raise InvalidRequest({"stream_mode": f"one or more of {', '.join(STREAM_MODES)}"})
    return tuple(dict.fromkeys(modes))


def decision(value: Any) -> tuple[bool, str]:
    """A ``Command``'s ``resume`` as approve (True) or deny (False), and the reason given.

    Accepted: a boolean; ``"approve"`` / ``"accept"`` / ``"deny"`` / ``"reject"``; ``{"approved":
    bool, "reason": str}`` (``"message"`` also names the reason); ``{"type": "approve" | "reject",
    "message": str}`` (the decision of LangChain's human-in-the-loop middleware); agent-chat-ui's
    ``[{"type": "accept" | "ignore" | "response", "args": ...}]``, where a ``response`` denies with
    its text as the reason. The reason is recorded on the approval step, as the REST API records it.
    """
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    reason = ""
    if isinstance(value, Mapping):
        reason = _reason(value)
        if isinstance(value.get("approved"), bool):
            return bool(value["approved"]), reason
        value = value.get("type", value.get("action"))
    if isinstance(value, bool):
        return value, reason
    words = {
        "approve": True,
        "accept": True,
        "yes": True,
        "deny": False,
        "reject": False,
        "ignore": False,
        "response": False,
    }
    if isinstance(value, str) and value.lower() in words:
        return words[value.lower()], reason
    raise InvalidRequest(
        {"command.resume": 'true / false, "approve" / "deny", or {"approved": bool, "reason": "<why>"}'}
    )


def _reason(value: Mapping[str, Any]) -> str:
    """The reason a ``resume`` object gives: ``reason``, ``message``, or a ``response``'s text."""
    found = value.get("reason", value.get("message"))
    if found is None and value.get("type") == "response" and isinstance(value.get("args"), str):
        found = value["args"]
    if found is None:
        return ""
    problem = reason_problem(found) if isinstance(found, str) else "the reason must be a string"
    if problem is not None:
        raise InvalidRequest({"command.resume.reason": problem})
    return str(found)


def run_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    """The run's fields from ``config.configurable`` then ``context`` (which wins)."""
    configurable = _mapping(_mapping(data, "config"), "configurable")
    context = _mapping(data, "context")
    unknown = sorted(set(context) - RUN_FIELDS)
    if unknown:
        raise InvalidRequest(
            {"context": f"unknown fields: {', '.join(unknown)}; known: {', '.join(sorted(RUN_FIELDS))}"}
        )
    return {**{k: v for k, v in configurable.items() if k in RUN_FIELDS}, **context}


def parse(data: Any, *, threaded: bool) -> RunCreate:
    """Check a ``RunCreate`` body (``threaded``: posted to a thread's ``runs``)."""
    if not isinstance(data, Mapping):
        raise InvalidRequest({"body": "expected a JSON object"})
    unknown = sorted(set(data) - KNOWN)
    refused = sorted(k for k in REFUSED if data.get(k) not in (None, [], ""))
    if unknown or refused:
        raise InvalidRequest({"body": f"not supported: {', '.join(unknown + refused)}"})
    assistant_id = data.get("assistant_id")
    if not isinstance(assistant_id, str) or not assistant_id:
        raise InvalidRequest({"assistant_id": "the name of a saved agent"})
    strategy = data.get("multitask_strategy")
    if strategy is not None and (not threaded or strategy not in STRATEGIES):
        raise InvalidRequest({"multitask_strategy": f"one of {', '.join(STRATEGIES)} (on a thread's runs)"})
    if_not_exists = data.get("if_not_exists") or "reject"
    if if_not_exists not in ("create", "reject"):
        raise InvalidRequest({"if_not_exists": "create or reject"})
    metadata = metadata_of(data)
    modes = stream_modes(data.get("stream_mode"))
    on_disconnect = data.get("on_disconnect") or "continue"
    if on_disconnect not in ("cancel", "continue"):
        raise InvalidRequest({"on_disconnect": "cancel or continue"})
    leaving = on_disconnect == "cancel"
    at = checkpoint_of(data)
    command = _mapping(data, "command")
    if command:
        if set(command) != {"resume"} or data.get("input") not in (None, {}):
            raise InvalidRequest({"command": 'only {"resume": ...}, without input'})
        resume = command["resume"]
        if isinstance(resume, Mapping) and "happened" in resume:  # a call in doubt: did it happen?
            if not isinstance(resume["happened"], bool):
                raise InvalidRequest({"command.resume.happened": "true or false"})
            if not resume["happened"] and "result" in resume:
                raise InvalidRequest({"command.resume.result": "only with happened: true"})
            return RunCreate(
                assistant_id,
                None,
                True,
                strategy,
                if_not_exists,
                modes,
                metadata,
                _reason(resume),
                leaving,
                at,
                happened=bool(resume["happened"]),
                result=resume.get("result"),
            )
        approved, reason = decision(resume)
        return RunCreate(assistant_id, None, approved, strategy, if_not_exists, modes, metadata, reason, leaving, at)
    prompt, system = prompt_of(data.get("input"))
    fields = {**run_fields(data), "prompt": prompt, "agent": assistant_id}
    if system and "system" not in fields:
        fields["system"] = system
    request = RunRequest.from_mapping(fields)
    return RunCreate(assistant_id, request, None, strategy, if_not_exists, modes, metadata, "", leaving, at)


def checkpoint_of(data: Mapping[str, Any]) -> str | None:
    """The checkpoint a body starts from (``checkpoint_id``, or ``checkpoint.checkpoint_id``), if any."""
    found = data.get("checkpoint_id")
    if found is None and data.get("checkpoint") is not None:
        found = _mapping(data, "checkpoint").get("checkpoint_id")
    if found is not None and not isinstance(found, str):
        raise InvalidRequest({"checkpoint_id": "a checkpoint id, as a thread's state names it"})
    return found or None
