"""Sign-in throttling (``access.signin``): past ``SIGN_IN_FAILURES`` failed sign-ins of one
username from one address, the playground's and the admin's sign-in refuse it, the right
password included, with a message saying so, until the window has passed."""

from __future__ import annotations

import time

import pytest

from nrllm_agents import admission
from nrllm_agents.conf import DEFAULTS
from nrllm_agents.models import RateCounter

pytestmark = pytest.mark.django_db

PASSWORD = "the-right-one-4821"


@pytest.fixture
def counts():
    admission.reset()
    yield
    admission.reset()


@pytest.fixture(params=["database", "redis"])
def store(request, settings):
    """Where the failures are counted: the limiter's two stores, which every process shares."""
    settings.NRLLM_AGENTS = {**getattr(settings, "NRLLM_AGENTS", {}), "RATE_LIMIT_STORE": request.param}
    settings.REDIS_URL = request.getfixturevalue("redis_url") if request.param == "redis" else None
    admission.reset()
    yield request.param
    admission.reset()


@pytest.mark.parametrize("page", ["/accounts/login/", "/admin/login/"])
def test_after_too_many_failures_the_right_password_is_refused_until_the_window_passes(
    client, django_user_model, settings, monkeypatch, store, page
):
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "SIGN_IN_FAILURES": "3/15min"}
    django_user_model.objects.create_user("carol", password=PASSWORD, is_staff=True)
    for _ in range(3):
        wrong = client.post(page, {"username": "carol", "password": "wrong"})
        assert wrong.status_code == 200 and "_auth_user_id" not in client.session
    refused = client.post(page, {"username": "carol", "password": PASSWORD})
    assert refused.status_code == 200 and "_auth_user_id" not in client.session
    assert "Too many failed sign-ins for this username from your address; try again in" in refused.content.decode()
    assert client.post(page, {"username": "CAROL", "password": PASSWORD}).status_code == 200  # case-folded
    assert RateCounter.objects.exists() == (store == "database")

    elsewhere = client.post(page, {"username": "carol", "password": PASSWORD}, REMOTE_ADDR="10.1.2.3")
    assert elsewhere.status_code == 302 and "_auth_user_id" in client.session  # per username and address
    client.logout()

    now = time.time
    monkeypatch.setattr(time, "time", lambda: now() + 2 * 15 * 60)  # the window has passed
    signed_in = client.post(page, {"username": "carol", "password": PASSWORD})
    assert signed_in.status_code == 302 and "_auth_user_id" in client.session


def test_it_is_on_by_default_and_a_setting_turns_it_off(client, django_user_model, settings, counts):
    assert DEFAULTS["SIGN_IN_FAILURES"].default == "10/15min"
    settings.NRLLM_AGENTS = {**getattr(settings, "NRLLM_AGENTS", {}), "SIGN_IN_FAILURES": None}
    django_user_model.objects.create_user("dave", password=PASSWORD)
    for _ in range(12):
        assert client.post("/accounts/login/", {"username": "dave", "password": "wrong"}).status_code == 200
    assert client.post("/accounts/login/", {"username": "dave", "password": PASSWORD}).status_code == 302
