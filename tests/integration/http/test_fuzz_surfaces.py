"""A fuzz pass over every input surface (issue 20): no input gives a 5xx or a traceback exit.

Hypothesis drives the playground's forms, the admin's filters and actions, the commands, the
session cookie and, through a hostile OpenAI-compatible server on loopback, what a provider
sends back. The API's schema-driven fuzz is ``api/test_schema.py``. Each property is checked
on the test database (PostgreSQL in CI, where a NUL or an out-of-range number would surface
as a database error).
"""

from __future__ import annotations

import json
import string

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from nrllm_agents.models import AgentRun, RunStatus, TerminationReason
from nrllm_agents.testing.chat_server import ChatCompletionServer

pytestmark = pytest.mark.django_db

FUZZ = hsettings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
# Text a hostile client sends: controls, NUL, surrogates, digits from other scripts, long numbers.
NASTY = st.one_of(
    st.text(max_size=60),
    st.sampled_from(["²", "①", "٣", "9" * 5000, "-1", "1e999", "NaN", "0x10", " 7 ", "\x00", "\ud800", "%00", "'--"]),
    st.text(alphabet=string.digits, min_size=1, max_size=30),
)
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)

# What a hostile OpenAI-compatible server may answer: any text, any JSON, or a completion whose
# fields hold the wrong types and out-of-range numbers.
BODIES = st.one_of(
    st.text(max_size=200),
    JSONISH.map(json.dumps),
    st.builds(
        lambda content, usage, calls: json.dumps(
            {
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content, "tool_calls": calls}}],
                "usage": usage,
            }
        ),
        st.one_of(st.none(), st.text(max_size=40), JSONISH),
        st.one_of(
            JSONISH,
            st.fixed_dictionaries(
                {"prompt_tokens": st.integers(-(2**70), 2**70), "completion_tokens": st.integers(-(2**70), 2**70)}
            ),
        ),
        st.one_of(st.none(), JSONISH, st.lists(st.fixed_dictionaries({"id": JSONISH, "function": JSONISH}))),
    ),
)


def clean_for_form(value: str) -> str:
    """Form posts cannot carry a lone surrogate (the test client encodes them as UTF-8)."""
    return value.encode("utf-8", "replace").decode("utf-8")


@pytest.fixture
def signed_in(alice):
    client = Client()
    client.force_login(alice)
    return client


@pytest.fixture
def superuser_client(django_user_model):
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def test_the_playground_start_form(signed_in):
    fields = ["prompt", "provider", "model", "tools", "max_iterations", "deadline_seconds", "max_total_tokens"]

    @FUZZ
    @given(st.dictionaries(st.sampled_from([*fields, "script", "mode"]), NASTY, max_size=8), st.sampled_from(fields))
    def check(form, _):
        data = {k: clean_for_form(v) for k, v in form.items()}
        data.setdefault("mode", "queued")
        response = signed_in.post("/playground/runs/", data)
        assert response.status_code < 500, (data, response.status_code)

    check()


def test_the_playground_fork_and_cancel_forms(signed_in, runtime, alice):
    stopped = runtime.run({"prompt": "p", "script": [{"content": "x"}]}, owner=alice).run_id

    @FUZZ
    @given(NASTY, NASTY)
    def check(sequence, reason):
        response = signed_in.post(f"/playground/runs/{stopped}/fork/", {"from_sequence": clean_for_form(sequence)})
        assert response.status_code < 500, (sequence, response.status_code)
        response = signed_in.post(f"/playground/runs/{stopped}/cancel/", {"reason": clean_for_form(reason)})
        assert response.status_code < 500, (reason, response.status_code)

    check()


def test_the_admin_filters_search_and_actions(superuser_client, runtime):
    run_id = runtime.enqueue({"prompt": "p", "script": [{"content": "x"}]})
    keys = [
        "status__exact",
        "termination_reason__exact",
        "health",
        "q",
        "o",
        "p",
        "created_at__gte",
        "owner__id__exact",
    ]

    @FUZZ
    @given(st.dictionaries(st.sampled_from(keys), NASTY, max_size=4), st.lists(NASTY, max_size=3), NASTY)
    def check(query, selected, action):
        response = superuser_client.get(
            "/admin/nrllm_agents/agentrun/", {k: clean_for_form(v) for k, v in query.items()}
        )
        assert response.status_code < 500, (query, response.status_code)
        response = superuser_client.post(
            "/admin/nrllm_agents/agentrun/",
            {
                "action": clean_for_form(action) if len(action) < 30 else "cancel_selected",
                "_selected_action": [clean_for_form(s) for s in selected] + [str(run_id)],
            },
        )
        assert response.status_code < 500, (action, selected, response.status_code)

    check()


def test_the_session_and_csrf_cookies():
    @FUZZ
    @given(NASTY, NASTY)
    def check(session, csrf):
        client = Client()
        # A header carries bytes; the server reads them as latin-1 (PEP 3333).
        client.cookies["sessionid"] = session.encode("latin-1", "replace").decode("latin-1")
        client.cookies["csrftoken"] = csrf.encode("latin-1", "replace").decode("latin-1")
        for path in ("/accounts/login/", "/api/runs/", "/playground/", "/metrics"):
            response = client.get(path)
            assert response.status_code < 500, (path, session, response.status_code)

    check()


COMMANDS = [
    lambda v: ["agent_run", "p", "--script", v],
    lambda v: ["agent_run", v, "--max-iterations", v],
    lambda v: ["agent_run", "p", "--deadline-seconds", v],
    lambda v: ["agent_run", "p", "--max-total-tokens", v, "--queued"],
    lambda v: ["agent_cancel", v, "--reason", v],
    lambda v: ["agent_cancel", "--older-than", v, "--dry-run"],
    lambda v: ["agent_cancel", "--status", v],
    lambda v: ["agent_events", v],
    lambda v: ["agent_events", "00000000-0000-0000-0000-000000000000", "--after", v],
    lambda v: ["agent_fork", v],
    lambda v: ["agent_reap", "--limit", v, "--dry-run"],
    lambda v: ["agent_approve", v, "--approve"],
]


def test_the_commands_exit_with_a_code_never_a_traceback():
    @FUZZ
    @given(st.sampled_from(range(len(COMMANDS))), NASTY)
    def check(which, value):
        args = COMMANDS[which](value.replace("\x00", "") or "x")  # argv cannot carry a NUL
        try:
            call_command(*args, stdout=_Sink(), stderr=_Sink())
        except CommandError as exc:
            assert exc.returncode in (1, 2, 3, 4), (args, exc.returncode)
        except SystemExit as exc:
            assert exc.code in (0, 1, 2, 3, 4), (args, exc.code)

    check()


class _Sink:
    def write(self, text: str) -> None:
        pass

    def flush(self) -> None:
        pass


def test_hostile_provider_responses_fail_the_run_clearly(runtime, monkeypatch):
    """Whatever an OpenAI-compatible server answers, a run ends completed or failed for a reason
    of the provider's, never ``internal_error``, and its error names no SQL."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("NRLLM_PROVIDER_STREAM", "0")  # a raw body is sent verbatim to a plain request
    bodies = BODIES

    @FUZZ
    @given(bodies)
    def check(body):
        with ChatCompletionServer([{"raw": body}, {"content": "after"}]) as server:
            monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
            result = runtime.run({"prompt": "p", "provider": "openai", "model": "m", "tools": ["calculator"]})
        run = AgentRun.objects.get(pk=result.run_id)
        assert run.status in (RunStatus.COMPLETED, RunStatus.FAILED), run.status
        assert run.termination_reason != TerminationReason.INTERNAL_ERROR, (body, run.error_message)
        assert "LINE 1" not in run.error_message and "INSERT" not in run.error_message

    check()
