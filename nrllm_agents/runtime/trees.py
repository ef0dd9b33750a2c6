"""Agents that call agents: a saved agent offered as a tool, whose call starts a child run.

A run whose request names ``agents`` offers each as a tool (its name, ``{"prompt": string}``,
the agent's description). A model turn that calls some of them suspends its run
(``waiting_for_children``, holding no worker) and creates one queued child run per call in the
same fence (``store.trees.spawn``); the children run on whichever executor runs queued runs,
concurrently. The child that ends last wakes its parent (``waiting_for_children → queued``),
which continues from its stream: each call is answered by its child's final answer, or by a
tool error saying how the child ended (cancelled on its own, failed, a limit). A child is
admitted like any run (the policy: the tree's user may use its agent and connection; its owner's
create rate limit, the budgets covering it, and the tree's ``TREE_MAX_RUNS``); a refused one
starts nothing, and its call is answered with the refusal as a tool error. A cancel of a run
cancels its whole subtree in one fence (``store.trees.cancel_tree``).
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.db import transaction

from ..access import policy
from ..admission import budgets, rates
from ..conf import app_settings
from ..domain import ToolCall, ToolError
from ..live.interrupts import watcher
from ..models import ACTIVE, Agent, AgentRun, RunStatus
from ..observability import hooks as observe
from ..presentation.outcomes import ApprovalAmbiguous, RunNotFound
from ..store import trees as tree_store
from ..store.results import Transition
from ..validation.run_request import InvalidRequest, RunRequest
from .worst_case import first_call

logger = logging.getLogger(__name__)

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"prompt": {"type": "string", "description": "what the sub-agent is asked to do"}},
    "required": ["prompt"],
    "additionalProperties": False,
}


class Family:
    """What the sub-agent tools of one segment share: the parent run and its place in its tree."""

    def __init__(self, run_id: uuid.UUID, names: Sequence[str]) -> None:
        row: dict[str, Any] = {}
        row.update(AgentRun.objects.filter(pk=run_id).values("tree_depth", "tree_root_id", "owner_id").first() or {})
        self.run_id = run_id
        self.depth: int = row.get("tree_depth", 0)
        self.root_id: uuid.UUID = row.get("tree_root_id") or run_id
        self.owner_id: Any = row.get("owner_id")
        self.names = frozenset(names)
        self._requests: dict[str, RunRequest | str] = {}

    def request(self, call: ToolCall) -> RunRequest | str:
        """The child's request for ``call`` (its agent's definition and the prompt), or why none."""
        if call.id not in self._requests:
            try:
                prompt = call.arguments.get("prompt")
                request = RunRequest.from_mapping({"agent": call.name, "prompt": prompt})
            except InvalidRequest as exc:
                self._requests[call.id] = f"the sub-agent cannot start: {exc}"
            else:  # a child is started like a run of the API: no test double in production
                refusal = policy.provider_refusal(request.provider)
                self._requests[call.id] = f"the sub-agent cannot start: {refusal}" if refusal else request
        return self._requests[call.id]

    def refusal(self, call: ToolCall, turn: Sequence[ToolCall]) -> str | None:
        """Why ``call`` starts no child run (``None``: it does)."""
        if self.depth + 1 > int(app_settings.MAX_TREE_DEPTH):
            return f"sub-agents may not be nested deeper than {app_settings.MAX_TREE_DEPTH} levels"
        mine = [c.id for c in turn if c.name in self.names]
        if call.id in mine and mine.index(call.id) >= int(app_settings.MAX_FAN_OUT):
            return f"at most {app_settings.MAX_FAN_OUT} sub-agent calls in one turn"
        prompt = call.arguments.get("prompt") if isinstance(call.arguments, Mapping) else None
        if not isinstance(prompt, str) or not prompt.strip():
            return 'the arguments must be {"prompt": "<a non-empty string>"}'
        request = self.request(call)
        return request if isinstance(request, str) else None


class SubAgentTool:
    """A saved agent as a tool of its parent run (``domain.tools.base.SubAgent``)."""

    spawns_run = True
    instant = True  # answering reads one row
    requires_approval = False
    parameters = PARAMETERS

    def __init__(self, name: str, description: str, family: Family) -> None:
        self.name = name
        self.description = description or f"Ask the agent {name!r}; it answers with its final answer."
        self.family = family

    def awaits(self, call: ToolCall, turn: Sequence[ToolCall]) -> bool:
        if self.family.refusal(call, turn) is not None:
            return False
        child = tree_store.child_of(self.family.run_id, call.id)
        return child is None or child["status"] in ACTIVE

    def starts(self, call: ToolCall, turn: Sequence[ToolCall]) -> bool:
        """Whether ``call`` is to start a child run now: it is not refused and has none yet."""
        return self.family.refusal(call, turn) is None and tree_store.child_of(self.family.run_id, call.id) is None

    def answer(self, call: ToolCall, turn: Sequence[ToolCall]) -> Any:
        refused = self.family.refusal(call, turn)
        if refused is not None:
            raise ToolError(refused)
        child = tree_store.child_of(self.family.run_id, call.id)
        if child is None:
            raise ToolError(f"the sub-agent {self.name!r} was not started")
        if child["status"] == RunStatus.COMPLETED and child["termination_reason"] == "completed":
            return child["final_text"]
        why = child["termination_reason"] or child["status"]
        said = child["cancel_reason"] or child["error_message"] or child["final_text"]
        raise ToolError(
            f"the sub-agent run {child['id']} ended {child['status']} ({why})" + (f": {said}" if said else "")
        )

    def execute(self, arguments: dict[str, Any]) -> Any:  # never called: the loop asks ``answer``
        raise ToolError("a sub-agent is answered by its run")


def cancel(run_id: uuid.UUID, *, besides: uuid.UUID | None = None, **how: Any) -> tree_store.TreeCancel:
    """Cancel a run and every active run below it (``store.trees.cancel_tree``: one fence; ``how``
    is its who, from where and why), then what follows every cancel of a tree, whoever asked (an
    operator, a limit, a budget): once it commits, the calls in flight below it that this process
    executes stop without waiting for the signal (but ``besides``'s, a segment stopping at its own
    boundary), and the cascade is counted."""
    tree = tree_store.cancel_tree(run_id, **how)
    for below in tree.cascaded.get(RunStatus.RUNNING, []):
        if below != besides:
            transaction.on_commit(functools.partial(watcher.cancelled_here, below))
    if tree.cascaded:
        observe.tree_cancelled(run_id, tree.cascaded_total)
    return tree


def approval_target(run_id: uuid.UUID, pick: uuid.UUID | None = None) -> uuid.UUID:
    """The run whose pending approval a decision on ``run_id`` is about: ``run_id`` itself when
    it waits for approval (or nothing below it does: deciding then says it is not waiting),
    else the one run below it that waits; ``pick`` chooses among several (itself or a run below).

    Raises ``RunNotFound`` for a ``pick`` outside ``run_id``'s subtree, ``ApprovalAmbiguous`` when
    several runs below it wait and no ``pick`` says which.
    """
    if pick is not None and pick != run_id:
        root = tree_store.root_of(run_id)
        if root is None or pick not in tree_store.subtree(run_id, root):
            raise RunNotFound(pick)
        return pick
    status = AgentRun.objects.filter(pk=run_id).values_list("status", flat=True).first()
    if status != RunStatus.WAITING_FOR_CHILDREN:  # waiting itself, ended, or never led a tree
        return run_id
    waiting = tree_store.awaiting_approval_below(run_id)
    if len(waiting) > 1:
        raise ApprovalAmbiguous(run_id, waiting)
    return waiting[0] if waiting else run_id


def tools_for(request: RunRequest, run_id: uuid.UUID) -> dict[str, SubAgentTool]:
    """The sub-agent tools a run offers (none when its request names no ``agents``)."""
    if not request.agents:
        return {}
    family = Family(run_id, request.agents)
    described = dict(Agent.objects.filter(name__in=request.agents).values_list("name", "description"))
    return {name: SubAgentTool(name, described.get(name, ""), family) for name in request.agents}


def _child(
    family: Family,
    call: ToolCall,
    call_sequence: int | None,
    parent: AgentRun,
    spawning: Callable[[ToolCall, uuid.UUID], Mapping[str, str]] | None,
) -> tree_store.Child | str:
    """The child run for ``call``, or why it cannot start (the call is then answered with it).

    Traced (``spawning`` given), the child continues the trace context of the call's
    ``execute_tool`` span; otherwise its parent's."""
    request = family.request(call)
    if isinstance(request, str):
        return request
    child_id = uuid.uuid4()
    fields = {
        "id": child_id,
        **request.row_fields(),
        "owner_id": family.owner_id,
        "tree_parent_id": family.run_id,
        "tree_root_id": family.root_id,
        "tree_depth": family.depth + 1,
        "tree_call_sequence": call_sequence,
        "trace_context": (spawning(call, child_id) if spawning is not None else None) or parent.trace_context,
    }
    return tree_store.Child(call.id, fields, request.as_dict(), call.name, call.arguments, lambda: first_call(request))


def admit_child(child: tree_store.Child) -> str | None:
    """Why ``child`` may not start, as any run of its owner and agent may not (``None``: it
    may, and it is counted): the create rate limit of its owner (a run of no owner has none),
    then every budget covering it, with room for its first call (``admission.budgets.admit``,
    which counts it). First of all, the policy: the tree's user (the root run's owner, which
    every run of its tree shares) may use the child's saved agent and connection."""
    owner_id = child.fields.get("owner_id")
    refused = _use_refusal(owner_id, child)
    if refused is not None:
        return refused
    if owner_id is not None:
        limited = rates.take_for(owner_id, rates.Action.CREATE)
        if limited is not None:
            return f"its user is creating runs too fast; try again in {limited.wait} s"
    try:
        budgets.admit_id(owner_id, child.fields.get("agent_version_id"), child.worst_case)
    except budgets.BudgetRefused as exc:
        return str(exc)
    return None


def _use_refusal(owner_id: Any, child: tree_store.Child) -> str | None:
    """Why the tree's user (of id ``owner_id``; ``None``: a run of no owner, not asked) may not
    use the child's saved agent or connection; ``None`` when they may."""
    if owner_id is None:
        return None
    user = get_user_model().objects.filter(pk=owner_id).first()
    try:
        policy.check_use(
            user if user is not None else AnonymousUser(),
            (child.fields.get("agent_snapshot") or {}).get("name"),
            child.fields.get("connection") or None,
        )
    except policy.UseRefused as exc:
        return f"the run's user may not use {exc.what} {exc.name!r}"
    return None


def suspend_for_children(
    run_id: uuid.UUID,
    *,
    owner: str,
    state: Any,
    tools: Mapping[str, Any],
    call_sequence: int | None,
    spawning: Callable[[ToolCall, uuid.UUID], Mapping[str, str]] | None = None,
) -> Transition:
    """The parent's turn calls sub-agents: suspend it and create their runs (one fence).

    ``spawning``: when the segment is traced, opens the span of a call about to start a child
    run, and returns the context that run continues (``SegmentSpans.spawning``); a call whose
    run exists already (a parent suspended again) starts none and gets no span.
    ``data["children"]`` lists the runs created, which the caller dispatches.
    """
    calls = list(state.pending_calls)
    parent = AgentRun.objects.get(pk=run_id)
    children: list[tree_store.Child] = []
    for call in calls:
        tool = tools.get(call.name)
        if isinstance(tool, SubAgentTool) and tool.starts(call, calls):
            child = _child(tool.family, call, call_sequence, parent, spawning)
            if isinstance(child, str):
                logger.warning("run %s: sub-agent call %s cannot start: %s", run_id, call.id, child)
                continue
            children.append(child)
    return tree_store.spawn(
        run_id,
        owner,
        state=state.as_dict(),
        iterations=state.iterations,
        usage=state.usage,
        children=children,
        max_runs=int(app_settings.TREE_MAX_RUNS),
        admit=admit_child,
        round_=state.round,
    )


def child_ended(run_id: uuid.UUID, dispatch: Callable[[uuid.UUID], Any]) -> None:
    """A run stopped: if it is a child and the last of its parent's to end, wake the parent.

    A parent that ended while it waited, by a cancel of its own (a limit of its subtree, which
    a run below it found spent), ended as a child too: its own parent is woken the same way."""
    parent = tree_store.parent_of(run_id)
    while parent is not None and not wake(parent, dispatch):
        parent = tree_store.parent_to_wake(parent)


def wake(parent: uuid.UUID, dispatch: Callable[[uuid.UUID], Any]) -> bool:
    """Move ``parent`` back to the queue once none of its children is active, and dispatch it;
    returns whether it moved."""
    if not tree_store.wake(parent):
        return False
    try:
        dispatch(parent)
    except Exception:  # an outage leaves it queued (the queued sweep), a refusal settled it
        logger.exception("run %s: its children ended but it could not be dispatched", parent)
    return True


def wake_stranded(dispatch: Callable[[uuid.UUID], Any], *, limit: int = 100) -> list[uuid.UUID]:
    """Wake every parent whose children all ended without waking it (a maintenance pass); returns
    the parents moved back to the queue."""
    woken = []
    for parent in tree_store.stranded_parents(limit):
        if tree_store.wake(parent):
            woken.append(parent)
            try:
                dispatch(parent)
            except Exception:
                logger.exception("run %s: woken by the sweep but it could not be dispatched", parent)
    return woken
