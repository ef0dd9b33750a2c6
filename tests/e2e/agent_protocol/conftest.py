"""A real server for the LangGraph SDKs: on PostgreSQL, gunicorn (gthread) with a real
``rqworker`` executing the queued runs; on SQLite, ``runserver`` with the in-process executor.

The caller (alice) has a DRF token and a saved agent ``helper`` on the scripted provider, whose
``script`` each test sends in the run's ``context``. ``transaction=True`` everywhere: the
server and the worker are other processes and see only committed rows.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import is_postgres
from tests.e2e.web.servers import ROOT, serve, start_worker, stop

from .contract import Recorder, RecordingProxy, problems

NODE_SDK = Path(os.environ.get("NRLLM_TEST_LANGGRAPH_SDK", ROOT / ".mcp-servers/node_modules/@langchain/langgraph-sdk"))


@dataclass(frozen=True)
class Site:
    """Where the protocol is served, and the caller's API key."""

    url: str
    api_key: str
    root: str


@pytest.fixture
def alice(db, django_user_model):
    from rest_framework.authtoken.models import Token

    from nrllm_agents.catalog import agents

    user = django_user_model.objects.create_user(username="alice")
    agents.save("helper", {"provider": "scripted", "tools": ["calculator", "sleep", "write_note"]}, description="demo")
    return user, Token.objects.create(user=user).key


@pytest.fixture
def server_env() -> dict[str, str]:
    """More environment for the server and the worker: a test parametrizes it to tighten a limit."""
    return {}


@pytest.fixture
def site(request, alice, child_env, server_env, tmp_path) -> Iterator[Site]:
    env = {**child_env, "NRLLM_STREAM_POLL_SECONDS": "0.05", "NRLLM_STREAM_HEARTBEAT_SECONDS": "2", **server_env}
    if not is_postgres():
        with serve("runserver", env, tmp_path) as base:
            yield Site(f"{base}/lg", alice[1], base)
        return
    env["REDIS_URL"] = request.getfixturevalue("redis_url")
    worker = start_worker(env, tmp_path)
    try:
        with serve("gunicorn", env, tmp_path, threads=16) as base:
            yield Site(f"{base}/lg", alice[1], base)
    finally:
        stop(worker)


@pytest.fixture
def contract(site) -> Iterator[Recorder]:
    """Records the SDK's exchanges; at teardown they must all fit ``/lg/openapi.json``."""
    import httpx

    recorder = Recorder(prefix="/lg")
    yield recorder
    document = httpx.get(f"{site.url}/openapi.json", headers={"x-api-key": site.api_key}).json()
    assert recorder.seen, "the test made no request"
    assert problems(document, recorder.seen) == []


@pytest.fixture
def sdk(site, contract):
    """The Python SDK's sync client, unmodified, with alice's token as its ``api_key``; every
    exchange it makes is checked against the OpenAPI document (``contract``)."""
    from langgraph_sdk import get_sync_client

    client = get_sync_client(url=site.url, api_key=site.api_key)
    client.http.client.event_hooks["response"].append(contract.hook)
    return client


@pytest.fixture
def proxied(site, contract) -> Iterator[str]:
    """The protocol's URL through a ``RecordingProxy``: what a client in another process (the
    Node SDK) sends and gets is checked against the OpenAPI document like the Python SDK's."""
    with RecordingProxy(site.root, contract.hook) as proxy:
        yield f"{proxy.url}/lg"
