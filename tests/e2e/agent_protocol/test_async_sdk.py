"""The SDK's async client against the same server: stream, deny an approval, cancel with wait."""

from __future__ import annotations

import asyncio

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.schema import Command

from nrllm_agents.models import AgentRun, AgentRunEvent, Note

from .helpers import ANSWER, NOTE, answer, said, slow

pytestmark = pytest.mark.django_db(transaction=True)  # the server and the worker are other processes


def test_the_async_client_streams_denies_and_cancels(site, contract):
    async def flow():
        client = get_client(url=site.url, api_key=site.api_key)
        client.http.client.event_hooks["response"].append(contract.ahook)
        thread = (await client.threads.create())["thread_id"]
        pieces = [
            p.data[0]["content"]
            async for p in client.runs.stream(
                thread, "helper", input=said("hi"), stream_mode="messages-tuple", context={"script": answer()}
            )
            if p.event == "messages"
        ]
        waited = await client.runs.wait(thread, "helper", input=said("note"), context={"script": NOTE})
        no = Command(resume={"approved": False, "reason": "no notes today"})
        denied = await client.runs.wait(thread, "helper", command=no)
        run = await client.runs.create(thread, "helper", input=said("long"), context={"script": slow()})
        for _ in range(600):
            if (await client.runs.get(thread, run["run_id"]))["status"] == "running":
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)
        await client.runs.cancel(thread, run["run_id"], wait=True)
        return pieces, waited, denied, run["run_id"]

    pieces, waited, denied, run_id = asyncio.run(flow())
    assert len(pieces) > 1 and "".join(pieces) == ANSWER
    assert waited["__interrupt__"] and "__interrupt__" not in denied
    assert Note.objects.count() == 0, "a denied call never ran"
    (approval,) = AgentRunEvent.objects.filter(kind="approval").values_list("payload", flat=True)
    assert (approval["approved"], approval["reason"]) == (False, "no notes today")
    row = AgentRun.objects.get(pk=run_id)
    assert row.status == "cancelled" and row.stopped_at is not None
    assert row.events.order_by("sequence").last().kind == "cancelled"
