"""``GET /api/tools/``: throttled like the other reads (issue 32: 40 parallel listings by one
user froze the web server, and the endpoint had no throttle)."""

from __future__ import annotations

import copy

import pytest
from django.conf import settings
from django.test import override_settings

from .conftest import token_client

pytestmark = pytest.mark.django_db


def test_listing_the_tools_is_throttled_per_user(alice, bob):
    rates = copy.deepcopy(settings.REST_FRAMEWORK)
    rates["DEFAULT_THROTTLE_RATES"]["tool_list"] = "2/min"
    with override_settings(REST_FRAMEWORK=rates):
        api = token_client(alice)
        assert [api.get("/api/tools/").status_code for _ in range(2)] == [200, 200]
        throttled = api.get("/api/tools/")
        assert throttled.status_code == 429, throttled.content
        assert throttled.json()["detail"] and "Retry-After" in throttled.headers
        # the allowance is per user: another caller still lists the tools
        assert token_client(bob).get("/api/tools/").status_code == 200
        assert api.get("/api/runs/").status_code == 200  # reading runs is not spent by the listing
