"""docs/agent-protocol.md's "Connecting", as written: its ``curl`` creates the ``helper`` agent
(none exists before), then its Python example streams a run of it with the unmodified SDK."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.e2e.web.servers import ROOT

PAGE = ROOT / "docs" / "agent-protocol.md"


@pytest.fixture
def alice(db, django_user_model):
    """alice (a superuser, as the page says) and her token, and no saved agent (the page's first
    block creates it)."""
    from rest_framework.authtoken.models import Token

    user = django_user_model.objects.create_superuser(username="alice", email="alice@example.com")
    return user, Token.objects.create(user=user).key


def _block(section: str, language: str) -> str:
    text = PAGE.read_text()
    body = text[text.index(section) :]
    return body.split(f"```{language}\n", 1)[1].split("```", 1)[0]


@pytest.mark.django_db(transaction=True)  # the server is another process: it sees committed rows only
def test_the_page_s_example_creates_the_agent_then_streams_its_run(site) -> None:
    assert 'include("nrllm_agents.agent_protocol.urls")' not in PAGE.read_text()
    create = _block("## Connecting", "bash").replace("http://127.0.0.1:8000", site.root)
    made = subprocess.run(
        ["bash", "-c", f"set -e\n{create.rstrip()} --fail-with-body -sS"],
        env={"PATH": os.environ["PATH"], "TOKEN": site.api_key},
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    example = _block("## Connecting", "python").replace("http://127.0.0.1:8000", site.root)
    ran = subprocess.run(
        [sys.executable, "-c", example.replace("<your API token>", site.api_key)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "values" in ran.stdout and "error" not in ran.stdout.split(), ran.stdout[-3000:]
