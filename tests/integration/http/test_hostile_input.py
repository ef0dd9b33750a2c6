"""Issue 20, the third round of breaks: hostile input from a browser, a provider and a shell.

Each test names the item it guards. Provider output goes through a real OpenAI-compatible
HTTP server on loopback (``testing.chat_server``) and the real ``openai`` SDK; everything is
stored in the test database (PostgreSQL in CI, where NUL and lone surrogates are refused).
"""

from __future__ import annotations

import getpass
import json

import pytest
from django.db import DatabaseError, transaction
from django.test import Client

from nrllm_agents.domain import ModelResponse, Usage
from nrllm_agents.domain.sanitize import MAX_TOKENS_PER_CALL
from nrllm_agents.models import AgentRun, AgentRunEvent, RunStatus
from nrllm_agents.runtime.runner import _safe_message
from nrllm_agents.testing.chat_server import ChatCompletionServer
from tests.integration.management.test_commands import run as run_command

pytestmark = pytest.mark.django_db

HOSTILE = "a\x00b\ud800c\udfffd"
CLEANED = "ab\ufffdc\ufffdd"


def run(*args: str) -> tuple[int, str, str]:
    ran = run_command(*args)
    return ran.code, ran.out, ran.err


@pytest.fixture
def openai_server(monkeypatch):
    def start(*entries, stream: bool = True):
        server = ChatCompletionServer(list(entries)).start()
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("NRLLM_PROVIDER_STREAM", "1" if stream else "0")
        started.append(server)
        return server

    started: list[ChatCompletionServer] = []
    yield start
    for server in started:
        server.stop()


# --- item 1: a NUL session cookie --------------------------------------------------------------
@pytest.mark.parametrize("path", ["/accounts/login/", "/api/runs/", "/playground/", "/metrics", "/admin/"])
def test_a_nul_session_cookie_is_no_session_not_a_500(path):
    client = Client()
    client.cookies["sessionid"] = "\x00" * 8  # sent as sessionid="\000\000…", which Django decodes
    client.cookies["csrftoken"] = "\x00abc"
    response = client.get(path)
    assert response.status_code < 500, (path, response.status_code)
    assert response.status_code in (200, 302, 401, 403), (path, response.status_code)


def test_a_user_with_a_nul_cookie_can_still_sign_in(alice):
    client = Client()
    client.cookies["sessionid"] = "\x00" * 40
    response = client.post("/accounts/login/", {"username": "alice", "password": "alice-pw"})
    assert response.status_code == 302
    assert client.get("/playground/").status_code == 200


# --- item 2: NUL and lone surrogates from the model ---------------------------------------------
@pytest.mark.parametrize("stream", [True, False])
def test_model_output_with_nul_and_lone_surrogates_is_stored_cleaned(runtime, openai_server, stream):
    openai_server(
        {
            "tool_calls": [
                {"id": "c\x001", "name": "calculator", "arguments": {"expression": "1+1", "n\x00te": HOSTILE}}
            ]
        },
        {"content": HOSTILE},
        stream=stream,
    )
    result = runtime.run({"prompt": "p", "provider": "openai", "model": "m", "tools": ["calculator"]})
    run = AgentRun.objects.get(pk=result.run_id)
    assert (run.status, run.termination_reason, run.error_message) == (RunStatus.COMPLETED, "completed", "")
    assert run.final_text == CLEANED
    llm = [e.payload for e in AgentRunEvent.objects.filter(run=run, kind="llm").order_by("sequence")]
    assert llm[0]["tool_calls"] == [
        {"id": "c1", "name": "calculator", "arguments": {"expression": "1+1", "nte": CLEANED}}
    ]
    assert llm[1]["content"] == CLEANED


def test_a_tool_result_with_nul_is_stored_cleaned(runtime, settings):
    settings.NRLLM_AGENTS = {"TOOLS": {"echo": "tests.integration.http.test_hostile_input.EchoTool"}}
    script = [{"tool_calls": [{"name": "echo", "arguments": {}}]}, {"content": "ok"}]
    result = runtime.run({"prompt": "p", "tools": ["echo"], "script": script})
    tool = AgentRunEvent.objects.get(run_id=result.run_id, kind="tool")
    assert result.status == RunStatus.COMPLETED
    assert tool.payload["result"] == {"k": CLEANED, "list": [CLEANED]}


class EchoTool:
    name = "echo"
    description = "returns hostile text"
    parameters = {"type": "object", "properties": {}}
    requires_approval = False

    def __init__(self, run_id=None):
        pass

    def execute(self, arguments):
        return {"k\x00": HOSTILE, "list": [HOSTILE]}


def test_a_database_error_is_stored_without_sql(runtime):
    run_id = runtime.enqueue({"prompt": "p", "script": [{"content": "x"}]})
    try:
        with transaction.atomic():
            AgentRunEvent.objects.create(run_id=run_id, sequence=0, kind="llm", payload={"content": "a\x00b"})
            AgentRun.objects.filter(pk=run_id).update(prompt_tokens=3_000_000_000)
    except (DatabaseError, ValueError) as exc:
        caught = exc
    else:  # SQLite stores both: nothing to refuse
        return
    message = _safe_message(caught)
    assert "LINE" not in message and "SELECT" not in message.upper() and "INSERT" not in message.upper()
    assert message.startswith("the database refused a write of this run") or isinstance(caught, ValueError)


# --- item 3: token counts out of range -----------------------------------------------------------
@pytest.mark.parametrize("stream", [True, False])
def test_token_counts_out_of_range_from_the_openai_provider_fail_the_call_clearly(runtime, openai_server, stream):
    """The shipped providers read a count outside 0..100,000,000 as a malformed response: the run
    fails at once for the provider, saying so, instead of sitting running until the reaper."""
    openai_server(
        {"content": "done", "usage": {"prompt_tokens": 3_000_000_000, "completion_tokens": -7}}, stream=stream
    )
    result = runtime.run({"prompt": "p", "provider": "openai", "model": "m", "tools": []})
    run = AgentRun.objects.get(pk=result.run_id)
    assert (run.status, run.termination_reason) == (RunStatus.FAILED, "provider_failed")
    assert "token count" in run.error_message and "LINE" not in run.error_message
    assert (run.prompt_tokens, run.completion_tokens) == (0, 0)


class WildUsageProvider:
    """A provider of a host project's own that passes on whatever its server counted."""

    name, model = "wild", "w"

    def __init__(self, request=None, run_id=None):
        pass

    def complete(self, messages, tools):
        return ModelResponse(content="done", usage=Usage(3_000_000_000, -7))


def test_token_counts_out_of_range_from_any_provider_are_bounded_and_said(runtime, settings):
    """Whatever provider a project plugs in, the loop bounds the counts before they are stored."""
    settings.NRLLM_AGENTS = {"PROVIDERS": {"wild": "tests.integration.http.test_hostile_input.WildUsageProvider"}}
    result = runtime.run({"prompt": "p", "provider": "wild", "tools": []})
    run = AgentRun.objects.get(pk=result.run_id)
    assert (run.status, run.final_text) == (RunStatus.COMPLETED, "done")
    assert (run.prompt_tokens, run.completion_tokens) == (MAX_TOKENS_PER_CALL, 0)
    llm = AgentRunEvent.objects.get(run=run, kind="llm").payload
    assert "3000000000" in llm["usage_note"] and llm["usage"]["prompt_tokens"] == MAX_TOKENS_PER_CALL


# --- item 6: numbers in scripts and flags -------------------------------------------------------
HUGE = "9" * 5000


def test_a_5000_digit_delay_is_a_form_error_in_the_playground(alice):
    client = Client()
    client.force_login(alice)
    response = client.post(
        "/playground/runs/", {"prompt": "p", "provider": "scripted", "script": f'[{{"delay": {HUGE}, "content": "x"}}]'}
    )
    assert response.status_code < 500
    assert "a number longer than" in response.content.decode()
    assert not AgentRun.objects.exists()


def test_a_5000_digit_number_is_a_400_in_the_api(alice):
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(alice)
    body = f'{{"prompt": "p", "script": [{{"delay": {HUGE}, "content": "x"}}]}}'
    response = api.post("/api/runs/", body, content_type="application/json")
    assert response.status_code == 400 and "a number longer than" in response.json()["detail"]


@pytest.mark.parametrize(
    "args, flag",
    [
        (["agent_run", "p", "--script", f'[{{"delay": {HUGE}, "content": "x"}}]'], "--script"),
        (["agent_run", "p", "--script", '[{"delay": 1e999, "content": "x"}]'], "--script"),
        (["agent_run", "p", "--script", '[{"delay": NaN, "content": "x"}]'], "--script"),
        (["agent_reap", "--limit", "9223372036854775808"], "--limit"),
        (["agent_events", "00000000-0000-0000-0000-000000000000", "--after", "9223372036854775808"], "--after"),
    ],
)
def test_absurd_numbers_are_usage_errors_not_tracebacks(args, flag):
    code, _, err = run(*args)
    assert code == 2 and flag in err and "Traceback" not in err
    assert not AgentRun.objects.exists()


# --- item 12: model output and reasons reach the terminal escaped --------------------------------
def test_agent_events_escapes_terminal_control_sequences(runtime):
    evil = "\x1b[2J\x1b]52;c;cm0gLXJmIH4=\x07\r\x1b[Kdone\x9b"
    result = runtime.run({"prompt": "p", "script": [{"content": evil}]})
    code, out, err = run("agent_events", str(result.run_id))
    assert code == 0
    assert not any(ch in out + err for ch in "\x1b\x07\r\x9b")
    assert "\\x1b[2J" in out
    code, out, _ = run("agent_events", str(result.run_id), "--json")
    assert not any(ch in out for ch in "\x1b\x07\r\x9b") and json.loads(out.splitlines()[-1])["final_text"] == evil


def test_a_cancel_reason_reaches_the_terminal_escaped(runtime):
    run_id = runtime.enqueue({"prompt": "p", "script": [{"content": "x"}]})
    runtime.cancel(run_id, source="api", reason="\x1b[31mfake\x1b[0m")
    code, out, err = run("agent_events", str(run_id))
    assert code == 0 and "\x1b" not in out + err and "\\x1b[31mfake" in out


# --- item 16: a fork plays its own script ----------------------------------------------------
def test_a_forks_own_script_plays_from_its_first_turn(runtime):
    parent = runtime.run(
        {
            "prompt": "p",
            "tools": ["calculator"],
            "script": [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "2*3"}}]}, {"content": "6"}],
        }
    )
    fork = runtime.fork(parent.run_id, from_sequence=2, overrides={"script": [{"content": "mine"}]}, queued=False)
    assert fork.status == RunStatus.COMPLETED, fork.error
    assert runtime.status(fork.run_id).final_text == "mine"
    # Without a script of its own, the fork continues its parent's script where the parent was.
    again = runtime.fork(parent.run_id, from_sequence=2, queued=False)
    assert runtime.status(again.run_id).final_text == "6"


# --- item 18: who cancels from the CLI, and who owns a CLI run -----------------------------------
def test_agent_cancel_records_the_os_user_by_default_and_by_when_given(runtime, alice):
    first = runtime.enqueue({"prompt": "p", "script": [{"content": "x"}]})
    assert run("agent_cancel", str(first))[0] == 0
    row = AgentRun.objects.get(pk=first)
    assert (row.cancelled_by_name, row.cancelled_by_id) == (getpass.getuser(), None)
    step = AgentRunEvent.objects.get(run_id=first, kind="cancelled")
    assert step.payload["by"] == getpass.getuser()
    code, out, _ = run("agent_events", str(first))
    assert f"by {getpass.getuser()} via cli" in out and "unknown user" not in out

    second = runtime.enqueue({"prompt": "p", "script": [{"content": "x"}]})
    third = runtime.enqueue({"prompt": "p", "script": [{"content": "x"}]})
    assert run("agent_cancel", str(second), "--by", "alice")[0] == 0
    assert run("agent_cancel", str(third), "--by", "ops-oncall")[0] == 0
    assert AgentRun.objects.get(pk=second).cancelled_by == alice
    assert AgentRun.objects.get(pk=third).cancelled_by_name == "ops-oncall"
    assert runtime.status(third).cancelled_by_id is None


def test_bulk_cancel_from_the_cli_records_who(runtime):
    ids = [runtime.enqueue({"prompt": "p", "script": [{"content": "x"}]}) for _ in range(3)]
    assert run("agent_cancel", "--status", "queued", "--by", "night-shift")[0] == 0
    assert set(AgentRun.objects.filter(pk__in=ids).values_list("cancelled_by_name", flat=True)) == {"night-shift"}
    assert {e.payload["by"] for e in AgentRunEvent.objects.filter(run_id__in=ids, kind="cancelled")} == {"night-shift"}


def test_agent_run_owner(alice):
    code, out, _ = run("agent_run", "p", "--script", '[{"content": "x"}]', "--owner", "alice", "--json")
    assert code == 0
    run_id = json.loads(out.splitlines()[0])["run_id"]
    assert AgentRun.objects.get(pk=run_id).owner == alice
    code, _, err = run("agent_run", "p", "--owner", "nobody")
    assert code == 2 and "--owner: no user named 'nobody'" in err
    assert AgentRun.objects.count() == 1
