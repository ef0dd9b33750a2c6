"""Issue 32 finding 10: the Content-Security-Policy on every page, the same on Django 5.2.

Guards: no page sent one. Django 6's ``ContentSecurityPolicyMiddleware`` sends ``SECURE_CSP``;
on 5.2 the app's own middleware (``http/csp.py``) must send exactly the same header, which this
test shows by swapping one for the other. The browser tests (``tests/e2e/web/test_csp.py``)
show that Chromium, enforcing it, refuses nothing.
"""

from __future__ import annotations

import re

import pytest
from django.conf import settings
from django.test import Client, override_settings

from nrllm_agents.http.csp import ContentSecurityPolicyMiddleware, build_policy
from tests.conftest import ROOT

PAGES = ["/playground/", "/playground/threads/", "/admin/", "/api/docs/", "/api/docs/?script="]
DJANGO_CSP = "django.middleware.csp.ContentSecurityPolicyMiddleware"
OURS = "nrllm_agents.http.csp.ContentSecurityPolicyMiddleware"


@pytest.fixture
def signed_in(django_user_model) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("op", "op@example.com", "pw"))
    return client


@pytest.mark.django_db
def test_every_page_sends_the_enforced_policy_without_inline_scripts(signed_in):
    for path in PAGES:
        answer = signed_in.get(path)
        assert answer.status_code == 200, path
        policy = answer["Content-Security-Policy"]
        assert "script-src 'self';" in policy and "'unsafe-inline'" not in policy.split("script-src")[1].split(";")[0]
        assert "Content-Security-Policy-Report-Only" not in answer
    assert "script-src 'self';" in Client().get("/accounts/login/")["Content-Security-Policy"]
    docs = signed_in.get("/api/docs/").content.decode()
    assert re.search(r"<script>\s*\S", docs) is None  # Swagger UI's start script is served apart


@pytest.mark.django_db
def test_the_apps_middleware_sends_the_same_header_as_djangos(signed_in):
    if DJANGO_CSP not in settings.MIDDLEWARE:
        pytest.skip("Django 5.2: only the app's middleware exists")  # the header is checked above
    django_header = signed_in.get("/playground/")["Content-Security-Policy"]
    swapped = [OURS if m == DJANGO_CSP else m for m in settings.MIDDLEWARE]
    with override_settings(MIDDLEWARE=swapped):
        assert signed_in.get("/playground/")["Content-Security-Policy"] == django_header


def test_build_policy_and_a_header_a_view_set_is_kept():
    assert build_policy({"default-src": ["'self'"], "img-src": ["'self'", "data:"], "x": [], "upgrade": True}) == (
        "default-src 'self'; img-src 'self' data:; upgrade"
    )
    from django.http import HttpResponse

    own = HttpResponse()
    own["Content-Security-Policy"] = "default-src 'none'"
    assert ContentSecurityPolicyMiddleware(lambda request: own)(None)["Content-Security-Policy"] == "default-src 'none'"


def test_no_template_holds_an_inline_script_or_handler():
    """Inline scripts and on* attributes would be refused by the policy: none is left."""
    templates = [*ROOT.glob("templates/**/*.html"), *ROOT.glob("nrllm_agents/templates/**/*.html")]
    assert templates
    for path in templates:
        text = re.sub(r"{% comment %}.*?{% endcomment %}", "", path.read_text(), flags=re.S)
        for tag in re.findall(r"<script\b[^>]*>", text):
            assert "src=" in tag or 'type="application/json"' in tag, (path, tag)
        assert re.search(r"\son[a-z]+\s*=", text) is None, path
        assert "javascript:" not in text, path
