"""Starting a run through the protocol: a new message on a thread (with its multitask
strategy), or a ``Command`` that resumes the thread's interrupt (our approval).

The checks are the REST API's: the body's storable text, the saved agent (404), the policy
(posting to a thread is its owner's; approving asks ``APPROVE``; the saved agent and the
connection the caller may use, 403), the provider refusal, then
``AgentRuntime.post`` / ``approve``, which fence everything else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..access import policy
from ..api.base import refuse_provider, rejectunstorable
from ..http import answers
from ..models import AgentRun, RunStatus, Thread
from ..runtime.agent_runtime import AgentRuntime, ApprovalNotPending
from ..runtime.threads import ThreadNotFound
from ..validation.run_request import InvalidRequest
from . import requests, shapes
from . import state as st
from .assistants import agent_named
from .threads import create, merge_metadata


@dataclass(frozen=True)
class Started:
    """A run started (or resumed): its thread, its id, and the step a stream starts after."""

    thread: Thread
    run_id: Any
    after: int
    modes: tuple[str, ...]
    cancel_on_disconnect: bool = False


def _thread(view: Any, thread_id: str | None, parsed: requests.RunCreate) -> Thread:
    user = view.request.user
    if thread_id is None:
        return create(user)
    try:
        return view.get_thread(thread_id, policy.Action.POST_MESSAGE)  # type: ignore[no-any-return]
    except (answers.Refused, ThreadNotFound) as exc:
        missing = isinstance(exc, ThreadNotFound) or exc.answer.status == 404
        if not missing or parsed.if_not_exists != "create":
            raise
        return create(user, thread_id)


def _resume(view: Any, runtime: AgentRuntime, thread: Thread, parsed: requests.RunCreate) -> tuple[Any, int]:
    waiting = st.latest_run(thread)
    if waiting is None or waiting.status != RunStatus.WAITING_FOR_APPROVAL:
        raise ApprovalNotPending(waiting.pk if waiting else thread.pk, waiting.status if waiting else "")
    refused = answers.refusal(policy.verdict(view.request.user, policy.Action.APPROVE, waiting), policy.Action.APPROVE)
    if refused is not None:
        raise answers.Refused(refused)
    last = waiting.events.order_by("-sequence").values_list("sequence", flat=True).first()
    if parsed.happened is not None:  # a call in doubt: whether it happened
        runtime.resolve(
            waiting.pk, parsed.happened, result=parsed.result, by=view.request.user, queued=True, reason=parsed.reason
        )
    else:
        runtime.approve(waiting.pk, bool(parsed.resume), by=view.request.user, queued=True, reason=parsed.reason)
    return waiting.pk, -1 if last is None else last


def _at_latest(thread: Thread, checkpoint_id: str) -> None:
    """A run may name the thread's latest checkpoint (what agent-chat-ui sends with a resume:
    the state it shows), which changes nothing; an earlier one would be a fork: 422."""
    latest = st.latest_run(thread)
    current = st.checkpoint(thread.pk, latest, latest.events.count() if latest else 0)["checkpoint_id"]
    if checkpoint_id != current:
        raise InvalidRequest(
            {"checkpoint": f"only the thread's latest checkpoint ({current}); a run cannot start from an earlier one"}
        )


def start(view: Any, runtime: AgentRuntime, thread_id: str | None) -> Started:
    """Check the body and start its run; raises what the handler answers (404, 409, 422)."""
    data = view.request.data
    if not isinstance(data, dict):
        raise InvalidRequest({"body": "expected a JSON object"})
    rejectunstorable(data)
    if isinstance(data.get("assistant_id"), str):
        agent_named(view.request.user, data["assistant_id"])  # 404 before the body's other fields
    parsed = requests.parse(data, threaded=thread_id is not None)
    if parsed.request is not None:  # 403 before a thread is created for it
        runtime.check_use(parsed.request, owner=view.request.user)
    thread = _thread(view, thread_id, parsed)
    if parsed.checkpoint_id is not None:
        _at_latest(thread, parsed.checkpoint_id)
    if parsed.resume is not None:
        run_id, after = _resume(view, runtime, thread, parsed)
        return Started(thread, run_id, after, parsed.stream_modes, parsed.cancel_on_disconnect)
    assert parsed.request is not None
    refuse_provider(parsed.request.provider)
    # As LangGraph's server labels a thread with what ran on it: its history finds it by them.
    merge_metadata(thread.pk, {"graph_id": shapes.GRAPH_ID, "assistant_id": parsed.assistant_id})
    run_id = runtime.post(thread.pk, parsed.request, owner=view.request.user, strategy=parsed.strategy)
    if parsed.metadata:
        AgentRun.objects.filter(pk=run_id).update(metadata=parsed.metadata)  # the client's labels, not a status
    return Started(thread, run_id, -1, parsed.stream_modes, parsed.cancel_on_disconnect)
