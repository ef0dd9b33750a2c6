"""Issue 48: what LangGraph's chat UI (``create-agent-chat-app``, agent-chat-ui) asks of ``/lg/``
before and while it streams, from a page on another origin: ``GET /info``, a CORS preflight
answered without credentials for an origin the settings name (and none for another), and every
``stream_mode`` the SDKs send, none refused. The SDK's traffic is checked against
``/lg/openapi.json`` (``contract``).
"""

from __future__ import annotations

import httpx
import pytest

from .helpers import said

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.sqlite]  # the server is another process

UI = "http://localhost:5173"  # the chat UI's dev server (vite)


@pytest.fixture
def server_env() -> dict[str, str]:
    return {"DJANGO_CORS_ALLOWED_ORIGINS": UI}


def preflight(url: str, origin: str) -> httpx.Response:
    return httpx.options(
        url,
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type,x-api-key",
        },
    )


def test_info_cors_and_every_stream_mode(site, sdk) -> None:
    info = sdk.http.get("/info")
    assert info["version"] and info["flags"]["assistants"] is True, info
    assert httpx.get(f"{site.url}/info").status_code == 200  # asked before any key is given

    allowed = preflight(f"{site.url}/threads", UI)
    assert allowed.status_code == 200, allowed.text
    assert allowed.headers["access-control-allow-origin"] == UI
    assert {"x-api-key", "content-type"} <= set(allowed.headers["access-control-allow-headers"].split(", "))
    other = preflight(f"{site.url}/threads", "http://elsewhere.example")
    assert "access-control-allow-origin" not in other.headers
    seen = httpx.get(f"{site.url}/info", headers={"Origin": UI})
    assert seen.headers["access-control-allow-origin"] == UI
    assert "content-location" in seen.headers["access-control-expose-headers"].lower()

    thread = sdk.threads.create()
    script = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}]}, {"content": "42"}]
    modes = ["custom", "debug", "tasks", "checkpoints", "tools", "lifecycle", "messages-tuple", "values"]
    parts = list(
        sdk.runs.stream(
            thread["thread_id"], "helper", input=said("6*7?"), stream_mode=modes, context={"script": script}
        )
    )
    events = [p.event for p in parts]
    assert "error" not in events, parts
    tasks = [p.data for p in parts if p.event == "tasks"]
    assert [t["name"] for t in tasks] == ["agent", "tools", "agent"], tasks
    checkpoints = [p.data for p in parts if p.event == "checkpoints"]
    assert checkpoints[-1]["values"]["messages"][-1]["content"] == "42"
    assert checkpoints[-1]["config"]["configurable"]["thread_id"] == thread["thread_id"]
    debug = [p.data["type"] for p in parts if p.event == "debug"]
    assert debug.count("task_result") == 3 and debug.count("checkpoint") == len(checkpoints)
    assert parts[-1].event == "values" and parts[-1].data["messages"][-1]["content"] == "42"
