"""Issue 9 finding 4: the django-rq dashboard is for superusers.

Guards: any staff user could empty the RQ queues from the dashboard, and the runs whose jobs
vanished then stayed ``queued`` forever. The refusal happens before django-rq's view runs,
so nothing here touches a Redis queue.
"""

from __future__ import annotations

import pytest
from django.test import Client

DASHBOARD = "/queues/"
PAGES = [
    "",
    "queues/0/",
    "queues/0/empty/",
    "queues/0/requeue-all/",
    "queues/0/failed/clear/",
    "queues/0/some-job/delete/",
    "queues/actions/0/",
    "workers/0/",
]


@pytest.mark.django_db
def test_staff_without_superuser_cannot_reach_any_dashboard_page(django_user_model):
    staff = django_user_model.objects.create_user("ops", is_staff=True)
    client = Client()
    client.force_login(staff)
    for page in PAGES:
        assert client.get(DASHBOARD + page).status_code == 403, page
        assert client.post(DASHBOARD + page, {"post": "yes"}).status_code == 403, page
    assert "rq-dashboard-link" not in client.get("/admin/nrllm_agents/agentrun/").content.decode()


@pytest.mark.django_db
def test_anonymous_callers_are_sent_to_the_admin_login():
    response = Client().get(DASHBOARD + "queues/0/empty/")
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


@pytest.mark.django_db
def test_superusers_keep_the_dashboard(django_user_model):
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root", "root@example.com", "pw"))
    assert 'id="rq-dashboard-link"' in client.get("/admin/nrllm_agents/agentrun/").content.decode()
    response = client.get(DASHBOARD)  # the stats page reads queue sizes (read-only)
    assert response.status_code == 200
