"""The loopback chat-completions server refuses a transcript the real API refuses."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from nrllm_agents.testing.chat_server import ChatCompletionServer

UNANSWERED = [
    {"role": "user", "content": "u"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    },
]


def post(server: ChatCompletionServer, messages: list[dict]) -> tuple[int, dict]:
    body = json.dumps({"model": "m", "messages": messages}).encode()
    request = urllib.request.Request(
        f"{server.base_url}/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def test_chat_server_refuses_an_unanswered_tool_call_and_accepts_the_answered_one():
    with ChatCompletionServer([{"content": "ok"}]) as server:
        status, body = post(server, UNANSWERED)
        assert status == 400 and "c1" in body["error"]["message"]
        status, body = post(server, UNANSWERED + [{"role": "user", "content": "next"}])
        assert status == 400  # the answer must come before the next message
        status, body = post(server, [{"role": "tool", "tool_call_id": "zz", "content": "x"}])
        assert status == 400 and "zz" in body["error"]["message"]
        status, body = post(server, UNANSWERED + [{"role": "tool", "tool_call_id": "c1", "content": "r"}])
        assert status == 200 and body["choices"][0]["message"]["content"] == "ok"
