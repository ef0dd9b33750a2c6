"""A thread's state as the protocol shows it: ``values`` (``{"messages": [...]}``), the
interrupt a waiting run holds, a checkpoint named after the run and its last step.

The state is the transcript of the thread's latest run that counts (not rolled back, not
deleted through the protocol): while it moves, its stream so far; once stopped, the transcript
the thread's next run starts from (``runtime.threads.transcript``: a cancelled turn repaired).
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from ..domain.replay import rebuild_state
from ..domain.thread import transcript_after
from ..models import AgentRun, AgentRunEvent, RunStatus, Thread
from ..presentation.presenters import event_dict
from ..runtime import threads
from . import messages as m

NODE = "agent"  # the node a model turn is attributed to
TOOLS_NODE = "tools"  # the node that runs tool calls (and waits for their approval)


def shown_runs(thread: Thread) -> QuerySet[AgentRun]:
    """The thread's runs the protocol shows (rolled back and deleted ones read 404)."""
    return thread.runs.filter(rolled_back=False, hidden_from_protocol=False)


def latest_run(thread: Thread) -> AgentRun | None:
    return shown_runs(thread).order_by("-thread_position").first()


def steps_of(run: AgentRun) -> list[dict[str, Any]]:
    return [event_dict(e) for e in AgentRunEvent.objects.filter(run_id=run.pk).order_by("sequence")]


def run_messages(run: AgentRun, steps: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Our messages of a run's stream: what it has written so far, or, once stopped, the
    transcript it leaves its thread. A purged run (retention) has none left."""
    if run.purged_at is not None:
        return []
    if run.stopped_at is not None and run.thread_id is not None and run.status != RunStatus.WAITING_FOR_APPROVAL:
        return transcript_after(steps if steps is not None else steps_of(run), status=run.status)
    return rebuild_state(steps if steps is not None else steps_of(run)).messages


def interrupts(run: AgentRun | None) -> list[dict[str, Any]]:
    """The interrupt a waiting run holds: the tool calls that need a human's approval, or the call
    in doubt (its worker was lost during it) that needs a human to say whether it happened."""
    if run is None or run.status != RunStatus.WAITING_FOR_APPROVAL or not run.suspended_state:
        return []
    calls = m.tool_calls(run.suspended_state.get("pending_calls") or [])
    doubt = run.suspended_state.get("in_doubt")
    value: dict[str, Any] = {
        "run_id": str(run.pk),
        "question": "Approve these tool calls?",
        "tool_calls": calls,
        "resume": 'command={"resume": true | false | {"approved": bool, "reason": str}}',
        **human_interrupt(calls),
    }
    if isinstance(doubt, dict):
        value["question"] = "Did this call happen? Its worker was lost during it: it may or may not have."
        value["in_doubt"] = doubt
        # a HumanInterrupt's Accept / Ignore would be an approval, refused for a call in doubt
        value["description"] = value["question"]
        value["config"] = {"allow_accept": False, "allow_ignore": False, "allow_respond": False, "allow_edit": False}
        value["resume"] = (
            'command={"resume": {"happened": true, "result": <what it returned>} | {"happened": false}} '
            "(false: it is made again), with an optional reason; or cancel the run"
        )
    return [{"value": value, "id": str(run.pk)}]


def human_interrupt(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """The same question as LangGraph's ``HumanInterrupt`` (what agent-chat-ui and
    create-agent-chat-app show with Accept, Ignore and a response): one action, the call or, for
    several, all of them. Accept approves; Ignore and a response deny (``requests.decision``);
    the arguments cannot be edited."""
    if len(calls) == 1:
        action = {"action": calls[0]["name"], "args": calls[0]["args"]}
    else:
        action = {"action": ", ".join(str(c["name"]) for c in calls), "args": {"tool_calls": calls}}
    return {
        "action_request": action,
        "config": {"allow_accept": True, "allow_ignore": True, "allow_respond": True, "allow_edit": False},
        "description": "Approve these tool calls? Accept runs them; Ignore, or a response, denies them.",
    }


def values(thread_id: Any, run: AgentRun | None, steps: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """``{"messages": [...]}`` of the thread after ``run`` (none: the transcript so far)."""
    if run is None:
        return {"messages": m.transcript(threads.transcript(thread_id)[0], thread_id)}
    return {"messages": m.transcript(run_messages(run, steps), thread_id)}


def checkpoint(thread_id: Any, run: AgentRun | None, steps: int) -> dict[str, Any]:
    return {
        "thread_id": str(thread_id),
        "checkpoint_ns": "",
        "checkpoint_id": f"{run.pk}.{steps}" if run is not None else None,
        "checkpoint_map": None,
    }


def state(thread: Thread, run: AgentRun | None = None, *, parent: AgentRun | None = None) -> dict[str, Any]:
    """The ``ThreadState`` after ``run`` (default: the thread's latest shown run)."""
    run = run if run is not None else latest_run(thread)
    steps = steps_of(run) if run is not None else []
    pending = interrupts(run)
    tasks = (
        [
            {
                "id": str(run.pk),
                "name": TOOLS_NODE,
                "path": [],
                "error": None,
                "interrupts": pending,
                "checkpoint": None,
                "state": None,
                "result": None,
            }
        ]
        if pending and run is not None
        else []
    )
    when = (run.finished_at or run.stopped_at or run.started_at or run.created_at) if run else thread.created_at
    return {
        "values": values(thread.pk, run, steps) if run is not None else {"messages": []},
        "next": [TOOLS_NODE] if pending else [],
        "tasks": tasks,
        "checkpoint": checkpoint(thread.pk, run, len(steps)),
        "metadata": {
            "run_id": str(run.pk) if run else None,
            "status": run.status if run else None,
            # the run's content was purged (retention): its messages are gone, its skeleton stays
            "purged_at": run.purged_at.isoformat() if run is not None and run.purged_at else None,
        },
        "created_at": when.isoformat(),
        "parent_checkpoint": checkpoint(thread.pk, parent, 0) if parent is not None else None,
        "interrupts": pending,
    }


def history(thread: Thread, limit: int) -> list[dict[str, Any]]:
    """One state per shown run of the thread, newest first (at most ``limit``)."""
    runs = list(shown_runs(thread).order_by("-thread_position")[: limit + 1])
    return [state(thread, run, parent=runs[i + 1] if i + 1 < len(runs) else None) for i, run in enumerate(runs[:limit])]
