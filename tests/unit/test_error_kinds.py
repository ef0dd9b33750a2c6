"""Errors carry a kind, not an HTTP status; one table at the edge maps kinds to statuses."""

from __future__ import annotations

import importlib
import pkgutil
import uuid

import nrllm_agents
from nrllm_agents.domain.errors import Kind, KindedError
from nrllm_agents.executors.dispatch import EnqueueError
from nrllm_agents.http import answers
from nrllm_agents.presentation.outcomes import ApprovalNotPending, InvalidRunId, RunNotFound
from nrllm_agents.runtime.forks import ParentStillActive
from nrllm_agents.runtime.threads import ThreadBusy, ThreadNotFound
from nrllm_agents.validation.run_request import InvalidRequest

RUN = uuid.UUID(int=7)


def every_kinded_error() -> set[type]:
    for info in pkgutil.walk_packages(nrllm_agents.__path__, "nrllm_agents."):
        if ".migrations" not in info.name and ".management.commands" not in info.name:
            importlib.import_module(info.name)
    found, todo = set(), [KindedError]
    while todo:
        for sub in todo.pop().__subclasses__():
            found.add(sub)
            todo.append(sub)
    return found


def test_every_kind_has_a_status_and_every_error_a_kind():
    assert set(answers.STATUS) == set(Kind)
    errors = every_kinded_error()
    assert len(errors) >= 10
    assert all(isinstance(getattr(e, "kind", None), Kind) for e in errors), errors
    assert not [e for e in errors if hasattr(e, "HTTP_STATUS")]  # no error names its own status


def test_the_answers_keep_their_words_and_subjects():
    cases = [
        (RunNotFound(RUN), 404, {"detail": "Run not found."}),
        (InvalidRunId("x"), 404, {"detail": "Run not found."}),  # a malformed id reads as an absent run
        (ThreadNotFound(RUN), 404, {"detail": "Thread not found."}),
        (ApprovalNotPending(RUN, "completed"), 409, {"run_id": str(RUN), "status": "completed"}),
        (ParentStillActive(RUN, "running"), 409, {"run_id": str(RUN), "status": "running"}),
        (ThreadBusy(RUN, RUN, "queued"), 409, {"thread_id": str(RUN), "run_id": str(RUN), "status": "queued"}),
        (EnqueueError(RUN, "bad queue"), 503, {"run_id": str(RUN)}),
        (InvalidRequest({"prompt": "required"}), 400, {"prompt": ["required"]}),
    ]
    for error, status, body in cases:
        answer = answers.for_error(error)
        assert answer is not None and answer.status == status, error
        assert body.items() <= answer.body.items(), (error, answer.body)
        assert answer.message
    assert answers.for_error(ValueError("not ours")) is None
