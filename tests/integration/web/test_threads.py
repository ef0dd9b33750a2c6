"""The playground's conversations without a browser: pages, posting, refusals (PostgreSQL and
SQLite). ``transaction=True``: a message's run executes on the in-process executor's thread."""

from __future__ import annotations

import pytest
from django.test import Client

from nrllm_agents.models import AgentRun, Thread
from nrllm_agents.runtime import threads
from tests.e2e.processes import wait_for
from tests.integration.api.test_threads import embedded  # noqa: F401 (autouse: the in-process executor)

pytestmark = pytest.mark.django_db(transaction=True)
JSON = {"HTTP_ACCEPT": "application/json"}


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user("alice")


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_conversation_from_new_to_answered_without_javascript(alice):
    client = signed_in(alice)
    created = client.post("/playground/threads/new/", {"title": "plain"})
    thread = Thread.objects.get(title="plain")
    assert created.status_code == 302 and created["Location"] == f"/playground/threads/{thread.pk}/"
    posted = client.post(
        f"/playground/threads/{thread.pk}/messages/",
        {"prompt": "hello", "multitask_strategy": "enqueue", "script": '[{"content": "hi there"}]'},
    )
    assert posted.status_code == 302
    run = AgentRun.objects.get(thread=thread)
    wait_for(lambda: AgentRun.objects.get(pk=run.pk).stopped_at, what="the run to stop")
    html = client.get(f"/playground/threads/{thread.pk}/").content.decode()
    assert "hello" in html and "hi there" in html and 'id="live-bubble"' not in html
    assert "plain" in client.get("/playground/threads/").content.decode()


def test_the_run_in_flight_is_live_with_stop_and_a_busy_reject_is_a_409(alice):
    client = signed_in(alice)
    thread = threads.create(owner=alice)
    busy = AgentRun.objects.get(
        pk=client.post(
            f"/playground/threads/{thread.pk}/messages/",
            {"prompt": "wait", "multitask_strategy": "enqueue", "script": '[{"delay": 30, "content": "x"}]'},
            **JSON,
        ).json()["run_id"]
    )
    html = client.get(f"/playground/threads/{thread.pk}/").content.decode()
    assert f'data-stream-url="/api/runs/{busy.pk}/stream/"' in html and 'id="stop-button"' in html
    refused = client.post(
        f"/playground/threads/{thread.pk}/messages/", {"prompt": "now", "multitask_strategy": "reject"}, **JSON
    )
    assert refused.status_code == 409 and str(busy.pk) in refused.json()["message"]
    assert AgentRun.objects.filter(thread=thread).count() == 1
    stopped = client.post(f"/playground/runs/{busy.pk}/cancel/", {"reason": "enough"}, **JSON)
    assert stopped.status_code in (200, 202)
    wait_for(lambda: AgentRun.objects.get(pk=busy.pk).stopped_at, what="the run to stop")


def test_the_policy_holds_on_conversation_pages(alice, django_user_model):
    bob = signed_in(django_user_model.objects.create_user("bob"))
    staff = signed_in(django_user_model.objects.create_user("op", is_staff=True))
    thread = threads.create(owner=alice)
    assert bob.get(f"/playground/threads/{thread.pk}/").status_code == 404
    assert bob.post(f"/playground/threads/{thread.pk}/messages/", {"prompt": "x"}, **JSON).status_code == 404
    page = staff.get(f"/playground/threads/{thread.pk}/")
    assert page.status_code == 200 and 'id="message-form"' not in page.content.decode()
    assert staff.post(f"/playground/threads/{thread.pk}/messages/", {"prompt": "x"}).status_code == 403
    assert Client().get(f"/playground/threads/{thread.pk}/").status_code == 302  # to the sign-in page
    assert not AgentRun.objects.exists()


@pytest.mark.parametrize(
    "body, field",
    [
        ({"prompt": "", "multitask_strategy": "enqueue"}, "prompt"),
        ({"prompt": "x", "multitask_strategy": "shout"}, "multitask_strategy"),
        ({"prompt": "x", "multitask_strategy": "enqueue", "script": "[{"}, "script"),
        ({"prompt": "x", "multitask_strategy": "enqueue", "script": '[{"dance": 1}]'}, "script"),
    ],
)
def test_a_bad_message_is_a_400_naming_the_field(alice, body, field):
    client = signed_in(alice)
    thread = threads.create(owner=alice)
    refused = client.post(f"/playground/threads/{thread.pk}/messages/", body, **JSON)
    assert refused.status_code == 400 and field in refused.json()["errors"], refused.json()
    page = client.post(f"/playground/threads/{thread.pk}/messages/", body)
    assert page.status_code == 400 and b"errorlist" in page.content
    assert not AgentRun.objects.exists()
