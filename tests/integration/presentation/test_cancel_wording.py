"""One cancel wording (issue 13): the API, the playground, the admin and ``agent_cancel`` say the
same sentence for the same outcome, from ``outcomes.cancel_wording``, with their own signal
(HTTP status, message level, exit code)."""

from __future__ import annotations

import uuid
from io import StringIO

import pytest
from django.contrib import messages
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from nrllm_agents.models import RunStatus

QUEUED = "cancelled; it was queued and will never execute."
WAITING = "cancelled; it was waiting for approval and can no longer be approved."
AGAIN = "was already cancelled; nothing changed."
NOTE = [{"tool_calls": [{"name": "write_note", "arguments": {"title": "t", "body": "b"}}]}]


def _api(client: Client, run_id: uuid.UUID) -> tuple[int, str]:
    response = client.post(f"/api/runs/{run_id}/cancel/", {}, content_type="application/json")
    return response.status_code, response.json()["detail"]


def _playground(client: Client, run_id: uuid.UUID) -> tuple[int, str]:
    response = client.post(reverse("nrllm_web:cancel", args=[run_id]), HTTP_ACCEPT="application/json")
    return response.status_code, response.json()["message"]


def _admin(client: Client, run_id: uuid.UUID) -> tuple[int, str]:
    url = reverse("admin:nrllm_agents_agentrun_cancel", args=[run_id])
    response = client.post(url, {"post": "yes"}, follow=True)
    [(level, text)] = [(m.level, m.message) for m in response.context["messages"]]
    return level, text


def _command(run_id: uuid.UUID) -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("agent_cancel", str(run_id), stdout=out, stderr=StringIO())
        code = 0
    except CommandError as exc:
        code = exc.returncode
    return code, out.getvalue().strip()


@pytest.mark.django_db
def test_every_surface_says_the_same_sentence_for_each_outcome(runtime, django_user_model):
    root = django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    client = Client()
    client.force_login(root)

    def waiting() -> uuid.UUID:
        result = runtime.run({"prompt": "note", "tools": ["write_note"], "script": NOTE}, owner=root)
        assert result.status == RunStatus.WAITING_FOR_APPROVAL
        return result.run_id

    def queued() -> uuid.UUID:
        return runtime.enqueue({"prompt": "later", "script": [{"content": "ok"}]}, owner=root)

    said = {}
    for name, act in {
        "api": lambda i: _api(client, i),
        "playground": lambda i: _playground(client, i),
        "admin": lambda i: _admin(client, i),
        "command": _command,
    }.items():
        q, w = queued(), waiting()
        said[name] = {"queued": (act(q), q), "waiting": (act(w), w), "again": (act(w), w)}

    for name, cases in said.items():
        for case, text in (("queued", QUEUED), ("waiting", WAITING), ("again", AGAIN)):
            (signal, sentence), run_id = cases[case]
            assert sentence == f"Run {run_id} {text}", (name, case)
    # Their own signals: HTTP 200 for all three, a success or a warning, exit code 0.
    assert [said["api"][c][0][0] for c in ("queued", "waiting", "again")] == [200, 200, 200]
    assert [said["playground"][c][0][0] for c in ("queued", "waiting", "again")] == [200, 200, 200]
    levels = [said["admin"][c][0][0] for c in ("queued", "waiting", "again")]
    assert levels == [messages.SUCCESS, messages.SUCCESS, messages.WARNING]
    assert [said["command"][c][0][0] for c in ("queued", "waiting", "again")] == [0, 0, 0]
