"""The threads admin: list and page per the policy, and the owner's message form (PostgreSQL
and SQLite). ``transaction=True``: a posted message's run executes on the in-process
executor's thread after commit."""

from __future__ import annotations

import pytest
from django.contrib import messages
from django.urls import reverse

from nrllm_agents.models import AgentRun
from nrllm_agents.runtime import threads
from tests.e2e.processes import wait_for
from tests.integration.api.test_threads import embedded  # noqa: F401 (autouse: the in-process executor)

from .test_runs import shown

pytestmark = pytest.mark.django_db(transaction=True)


def page(thread) -> str:
    return reverse("admin:nrllm_agents_thread_change", args=[thread.pk])


def message_url(thread) -> str:
    return reverse("admin:nrllm_agents_thread_message", args=[thread.pk])


def test_the_owner_posts_from_the_threads_page_and_sees_runs_and_transcript(client, django_user_model):
    owner = django_user_model.objects.create_superuser("op", "op@example.com", "pw")
    client.force_login(owner)
    thread = threads.create(owner=owner, title="support chat")
    listed = client.get(reverse("admin:nrllm_agents_thread_changelist")).content.decode()
    assert "support chat" in listed
    posted = client.post(message_url(thread), {"prompt": "hello there", "multitask_strategy": "enqueue"}, follow=True)
    run = AgentRun.objects.get(thread=thread)
    said = shown(posted)
    assert said[0][0] == messages.SUCCESS and str(run.pk) in said[0][1]
    wait_for(lambda: AgentRun.objects.get(pk=run.pk).stopped_at, what="the run to stop")
    html = client.get(page(thread)).content.decode()
    assert "hello there" in html and str(run.pk) in html and 'id="thread-message"' in html
    run_page = client.get(reverse("admin:nrllm_agents_agentrun_change", args=[run.pk])).content.decode()
    assert page(thread) in run_page


def test_staff_see_other_users_threads_but_may_not_post_to_them(client, django_user_model):
    alice = django_user_model.objects.create_user("alice")
    staff = django_user_model.objects.create_superuser("op", "op@example.com", "pw")
    thread = threads.create(owner=alice)
    client.force_login(staff)
    html = client.get(page(thread)).content.decode()
    assert 'id="thread-message"' not in html
    assert client.post(message_url(thread), {"prompt": "as alice"}).status_code == 403
    assert not AgentRun.objects.exists()


def test_a_bad_message_or_a_busy_thread_is_a_message_not_a_500(client, django_user_model):
    owner = django_user_model.objects.create_superuser("op", "op@example.com", "pw")
    client.force_login(owner)
    thread = threads.create(owner=owner)
    said = shown(client.post(message_url(thread), {"prompt": "", "multitask_strategy": "shout"}, follow=True))
    assert said[0][0] == messages.ERROR and "Not posted" in said[0][1]
    assert client.post(reverse("admin:nrllm_agents_thread_message", args=["nope"]), {}).status_code == 404
    assert client.get(message_url(thread)).status_code == 405
    assert not AgentRun.objects.exists()
