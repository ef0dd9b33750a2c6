"""Fixtures for the REST API tests: users, authenticated clients, and runs in every state.

Runs are made through the real runtime (scripted provider, real tools), so each one is in the
state the runtime itself leaves it in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from nrllm_agents import admission
from nrllm_agents.models import AgentRun, RunStatus

ANSWER = [{"content": "done", "usage": {"prompt_tokens": 5, "completion_tokens": 2}}]
NOTE_THEN_ANSWER = [
    {
        "tool_calls": [{"name": "write_note", "arguments": {"title": "t", "body": "b"}}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3},
    },
    {"content": "noted"},
]
EXHAUSTED = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "1 + 1"}}]}]


@pytest.fixture(autouse=True)
def _fresh_throttle_history():
    """Rate counters are keyed by user pk (in Redis they outlive a test); pks repeat across tests."""
    admission.reset()
    yield
    admission.reset()


@pytest.fixture
def make_user(django_user_model) -> Callable[..., Any]:
    def make(username: str, *, staff: bool = False) -> Any:
        # No password: hashing one costs about a second; session tests use force_login.
        return django_user_model.objects.create_user(username=username, is_staff=staff)

    return make


@pytest.fixture
def alice(make_user):
    return make_user("alice")


@pytest.fixture
def bob(make_user):
    return make_user("bob")


@pytest.fixture
def staff(make_user):
    return make_user("operator", staff=True)


def token_client(user: Any) -> APIClient:
    """A client authenticated the way other services are: ``Authorization: Token ...``."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return client


@pytest.fixture
def client_for() -> Callable[[Any], APIClient]:
    return token_client


@pytest.fixture
def api(alice) -> APIClient:
    return token_client(alice)


@pytest.fixture
def make_run(runtime) -> Callable[..., AgentRun]:
    """A run owned by ``owner`` in ``state``, left there by the runtime itself.

    queued: enqueued (inside the test transaction the dispatch never fires, so it stays queued);
    completed / failed / waiting: executed here; cancelled: queued, then cancelled from the CLI;
    running: begun by the store as a segment in another process would (no segment here acts on it).
    """
    from nrllm_agents import store
    from nrllm_agents.domain import Usage
    from nrllm_agents.store import trees

    def make(owner: Any, state: str = RunStatus.QUEUED, prompt: str = "task") -> AgentRun:
        if state == RunStatus.QUEUED:
            return AgentRun.objects.get(
                pk=runtime.enqueue({"prompt": prompt, "script": ANSWER, "tools": []}, owner=owner)
            )
        if state == RunStatus.CANCELLED:
            run = make(owner, RunStatus.QUEUED, prompt)
            runtime.cancel(run.pk, source="cli", reason="setup")
            return AgentRun.objects.get(pk=run.pk)
        if state == RunStatus.RUNNING:
            return store.begin({"prompt": prompt, "provider": "scripted", "owner": owner}, claimed_by="elsewhere")
        if state == RunStatus.WAITING_FOR_CHILDREN:  # a parent whose sub-agent run is queued
            parent = store.begin({"prompt": prompt, "provider": "scripted", "owner": owner}, claimed_by="here")
            child = trees.Child("call_1", {"prompt": "sub", "provider": "scripted", "owner": owner}, {"prompt": "sub"})
            trees.spawn(parent.pk, "here", state={}, iterations=0, usage=Usage(), children=[child])
            return AgentRun.objects.get(pk=parent.pk)
        script, tools = {
            RunStatus.COMPLETED: (ANSWER, []),
            RunStatus.FAILED: (EXHAUSTED, ["calculator"]),
            RunStatus.WAITING_FOR_APPROVAL: (NOTE_THEN_ANSWER, ["write_note"]),
        }[state]
        result = runtime.run({"prompt": prompt, "script": script, "tools": tools}, owner=owner)
        assert result.status == state, result
        return AgentRun.objects.get(pk=result.run_id)

    return make
