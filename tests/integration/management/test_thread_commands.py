"""``agent_run --thread`` and ``agent_threads`` (create, list, show, purge): exit codes, output,
and what a purge deletes and keeps.

``transaction=True``: a message's run executes on the in-process executor's thread after commit.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from nrllm_agents.models import AgentRun, AgentRunEvent, Note, Thread
from nrllm_agents.runtime import threads
from nrllm_agents.runtime.agent_runtime import AgentRuntime
from tests.e2e.processes import wait_for
from tests.integration.api.test_threads import embedded  # noqa: F401 (autouse: the in-process executor)

from .test_commands import run

pytestmark = pytest.mark.django_db(transaction=True)


def created_thread() -> str:
    ran = run("agent_threads", "create", "--title", "chat")
    assert ran.code == 0, ran.err
    return ran.out.split()[1]


def test_agent_run_thread_posts_follows_and_continues_the_transcript():
    thread = created_thread()
    first = run("agent_run", "hello", "--thread", thread, "--json", "--script", json.dumps([{"content": "hi"}]))
    assert first.code == 0, first.err
    lines = [json.loads(line) for line in first.out.splitlines()]
    assert lines[-1]["status"] == "completed", lines
    assert [line["step"]["kind"] for line in lines if "step" in line][0] == "thread"
    expect = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}, {"content": "again"}]
    second = run(
        "agent_run", "again", "--thread", thread, "--multitask", "reject", "--script",
        json.dumps([{"content": "ok", "expect": expect}]),
    )  # fmt: skip
    assert second.code == 0, second.err + second.out
    shown = run("agent_threads", "show", thread)
    assert shown.code == 0 and "transcript (4 messages)" in shown.out and "assistant: ok" in shown.out
    assert thread in run("agent_threads", "list").out


def test_agent_run_thread_refused_by_a_busy_thread_exits_1_naming_the_run():
    thread = created_thread()
    sleepy = [{"tool_calls": [{"name": "sleep", "arguments": {"seconds": 30}}]}, {"content": "x"}]
    busy = AgentRuntime().post(thread, {"prompt": "wait", "tools": ["sleep"], "script": sleepy})
    wait_for(lambda: AgentRun.objects.filter(pk=busy, status="running").exists(), what="the busy run")
    ran = run("agent_run", "now", "--thread", thread, "--multitask", "reject", "--queued")
    assert ran.code == 1 and str(busy) in ran.err and "busy" in ran.err
    assert AgentRun.objects.filter(thread_id=thread).count() == 1
    AgentRuntime().cancel(busy, source="cli")
    wait_for(lambda: AgentRun.objects.get(pk=busy).stopped_at, what="the busy run to stop")


@pytest.mark.parametrize(
    "args, says",
    [
        (("agent_run", "p", "--thread", "nope"), "--thread"),
        (("agent_run", "p", "--thread", "7f1d0c1e-0000-4000-8000-000000000000"), "no thread"),
        (("agent_run", "p", "--multitask", "enqueue"), "--multitask goes with --thread"),
        (("agent_threads", "purge", "--inactive-for", "soon"), "--inactive-for"),
        (("agent_threads", "purge", "--inactive-for", "999999999w"), "--inactive-for"),
        (("agent_threads", "show", "nope"), "no thread"),
        (("agent_threads", "create", "--title", "a\x00b"), "--title"),
    ],
)
def test_bad_input_is_a_usage_error(args, says):
    ran = run(*args)
    assert ran.code == 2 and says in ran.err, ran.err
    assert not AgentRun.objects.exists()


def test_purge_deletes_inactive_threads_with_their_runs_and_nothing_else():
    runtime = AgentRuntime()
    old, recent = threads.create(title="old"), threads.create(title="recent")
    answer = {"tools": [], "script": [{"content": "fine"}]}
    old_runs = [runtime.post(old.pk, {"prompt": f"m{i}", **answer}) for i in range(2)]
    kept_run = runtime.post(recent.pk, {"prompt": "r", **answer})
    wait_for(lambda: not AgentRun.objects.filter(stopped_at__isnull=True).exists(), what="the runs to stop")
    fork = runtime.fork(old_runs[0], queued=False).run_id  # a run of no thread, forked from a purged one
    loose = runtime.run({"prompt": "alone", **answer}).run_id
    note = Note.objects.create(run_id=old_runs[1], title="t", body="b")
    Thread.objects.filter(pk=old.pk).update(last_activity_at=timezone.now() - timedelta(days=91))

    dry = run("agent_threads", "purge", "--inactive-for", "90d", "--dry-run")
    assert dry.code == 0 and "would purge 1 thread(s) and their 2 run(s)" in dry.out
    assert Thread.objects.count() == 2 and AgentRun.objects.count() == 5

    done = run("agent_threads", "purge", "--inactive-for", "90d")
    assert done.code == 0 and "purged 1 thread(s) and their 2 run(s)" in done.out
    assert set(Thread.objects.values_list("pk", flat=True)) == {recent.pk}
    assert set(AgentRun.objects.values_list("pk", flat=True)) == {kept_run, fork, loose}
    assert not AgentRunEvent.objects.filter(run_id__in=old_runs).exists()
    assert AgentRun.objects.get(pk=fork).parent_id is None  # the fork stays, its parent gone
    note.refresh_from_db()
    assert note.run_id is None


def test_purge_keeps_an_inactive_thread_whose_run_has_not_stopped():
    thread = threads.create()
    sleepy = [{"tool_calls": [{"name": "sleep", "arguments": {"seconds": 30}}]}, {"content": "x"}]
    busy = AgentRuntime().post(thread.pk, {"prompt": "wait", "tools": ["sleep"], "script": sleepy})
    wait_for(lambda: AgentRun.objects.filter(pk=busy, status="running").exists(), what="the busy run")
    Thread.objects.filter(pk=thread.pk).update(last_activity_at=timezone.now() - timedelta(days=200))
    report = threads.purge(inactive_for=timedelta(days=90))
    assert report.threads == [] and report.skipped_active == 1 and AgentRun.objects.filter(pk=busy).exists()
    AgentRuntime().cancel(busy, source="cli")
    wait_for(lambda: AgentRun.objects.get(pk=busy).stopped_at, what="the busy run to stop")
