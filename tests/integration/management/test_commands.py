"""The agent_* management commands, called in-process: exit codes, messages, output shapes,
and that refused or malformed requests change nothing in the database."""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings
from django.utils import timezone

from nrllm_agents import store
from nrllm_agents.executors import dispatch
from nrllm_agents.models import AgentRun, AgentRunEvent, Note, RunStatus
from nrllm_agents.presentation import presenters
from nrllm_agents.validation.run_request import RunRequest
from tests import waits

SLOW = [{"delay": 0.15, "tool_calls": [{"name": "sleep", "arguments": {"seconds": 0.1}}]}] * 8 + [{"content": "done"}]
NOTE = [{"tool_calls": [{"name": "write_note", "arguments": {"title": "t", "body": "b"}}]}, {"content": "noted"}]


@dataclass
class Ran:
    code: int
    out: str
    err: str

    @property
    def all_lines(self) -> list[dict[str, Any]]:
        """stdout as JSON lines; every one must carry an ``event`` key."""
        parsed = [json.loads(line) for line in self.out.splitlines()]
        assert parsed and all("event" in obj for obj in parsed), self.out
        return parsed

    @property
    def lines(self) -> list[dict[str, Any]]:
        """The JSON lines but the live text of the model (``delta``: never recorded)."""
        return [line for line in self.all_lines if line["event"] != "delta"]

    @property
    def deltas(self) -> list[dict[str, Any]]:
        return [line for line in self.all_lines if line["event"] == "delta"]


def run(*args: Any) -> Ran:
    """Call a command; its exit code is 0, a CommandError's returncode, or a SystemExit's code."""
    out, err = StringIO(), StringIO()
    try:
        call_command(*args, stdout=out, stderr=err)
        code = 0
    except CommandError as exc:
        code = exc.returncode
        err.write(str(exc))
    except SystemExit as exc:
        code = int(exc.code)
    return Ran(code, out.getvalue(), err.getvalue())


def snapshot() -> tuple[list[dict[str, Any]], list[tuple[Any, ...]], int]:
    runs = list(AgentRun.objects.order_by("pk").values())
    events = list(AgentRunEvent.objects.order_by("run_id", "sequence").values_list("run_id", "sequence", "kind"))
    return runs, events, Note.objects.count()


def completed(runtime) -> uuid.UUID:
    return runtime.run({"prompt": "p", "tools": [], "script": [{"content": "ok"}]}).run_id


def failed(runtime) -> uuid.UUID:
    script = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}]}]
    return runtime.run({"prompt": "p", "tools": ["calculator"], "script": script, "max_iterations": 1}).run_id


def waiting(runtime) -> uuid.UUID:
    result = runtime.run({"prompt": "p", "tools": ["write_note"], "script": NOTE})
    assert result.status == RunStatus.WAITING_FOR_APPROVAL
    return result.run_id


def queued() -> uuid.UUID:
    request = RunRequest.from_mapping({"prompt": "p", "tools": [], "script": [{"content": "ok"}]})
    return store.create_queued(request.row_fields(), request.as_dict()).pk


def stored_steps(run_id: Any) -> list[dict[str, Any]]:
    return [
        json.loads(json.dumps(presenters.event_dict(e)))
        for e in AgentRunEvent.objects.filter(run_id=run_id).order_by("sequence")
    ]


# --- agent_run ---------------------------------------------------------------------------------
@pytest.mark.django_db
def test_agent_run_streams_every_step_as_json_and_exits_0():
    script = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}]}, {"content": "42"}]
    ran = run("agent_run", "compute", "--tool", "calculator", "--script", json.dumps(script), "--json")
    lines = ran.lines
    run_id = lines[0]["run_id"]
    assert ran.code == 0 and lines[0] == {"event": "started", "run_id": run_id}
    assert [line["step"] for line in lines[1:-1]] == stored_steps(run_id)
    assert [s["step"]["kind"] for s in lines[1:-1]] == ["request", "llm", "tool", "request", "llm"]
    assert lines[-1] == json.loads(json.dumps(presenters.summary_event(AgentRun.objects.get(pk=run_id))))
    assert lines[-1]["event"] == "done" and lines[-1]["status"] == "completed" and lines[-1]["final_text"] == "42"
    # The model's words were printed live too, before its llm step.
    assert [(d["text"], d["offset"], d["run_id"]) for d in ran.deltas] == [("42", 0, run_id)]
    order = [line["event"] if line["event"] != "step" else line["step"]["kind"] for line in ran.all_lines]
    assert order.index("delta") < len(order) - 1 - order[::-1].index("llm")
    assert f"python manage.py agent_cancel {run_id}" in ran.err


@pytest.mark.django_db
def test_agent_run_human_output_starts_with_the_run_id(tmp_path):
    path = tmp_path / "script.json"
    path.write_text(json.dumps([{"content": "hello there"}]))
    ran = run("agent_run", "hi", "--script", f"@{path}")
    first, *steps, last = ran.out.splitlines()
    run_id = AgentRun.objects.get().pk
    assert ran.code == 0 and first == f"run {run_id}"
    assert [s.split()[1] for s in steps] == ["request", "llm"]
    assert last.startswith(f"run {run_id} completed") and last.endswith("hello there")


@pytest.mark.django_db
def test_agent_run_awaiting_approval_exits_4_and_failure_exits_1():
    ran = run("agent_run", "note it", "--tool", "write_note", "--script", json.dumps(NOTE), "--json")
    assert ran.code == 4
    assert ran.lines[-1]["event"] == "awaiting_approval"
    assert ran.lines[-1]["pending_approval"][0]["name"] == "write_note"
    script = [{"tool_calls": [{"name": "calculator", "arguments": {"expression": "1"}}]}]
    ran = run(
        "agent_run", "loop", "--tool", "calculator", "--script", json.dumps(script), "--max-iterations", "1", "--json"
    )
    assert ran.code == 1
    assert (ran.lines[-1]["event"], ran.lines[-1]["termination_reason"]) == ("failed", "max_iterations")


@pytest.mark.parametrize(
    "args, names",
    [
        (["--script", "[{not json"], "--script: not valid JSON"),
        (["--script", "@/nonexistent/script.json"], "--script: cannot read"),
        (["--script", '[{"contnt": "x"}]'], "--script:"),
        (["--tool", "calculator", "--tool", "nope"], "--tool: unknown tools: nope"),
        (["--provider", "nope"], "--provider: unknown provider"),
        (["--max-iterations", "0"], "--max-iterations:"),
        (["--follow"], "--follow goes with --queued"),
    ],
)
@pytest.mark.django_db
def test_agent_run_usage_errors_exit_2_name_the_flag_and_store_nothing(args, names):
    ran = run("agent_run", "p", *args)
    assert ran.code == 2 and names in ran.err and "\n" not in ran.err.strip()
    assert ran.out == "" and not AgentRun.objects.exists()


# transaction=True: the run executes on another thread and is cancelled from a third one.
@pytest.mark.django_db(transaction=True)
def test_agent_run_cancelled_by_agent_cancel_exits_3():
    cancelled: list[Ran] = []

    def cancel_when_running() -> None:
        try:
            for _ in range(400):
                run_id = AgentRunEvent.objects.filter(kind="tool").values_list("run_id", flat=True).first()
                if run_id:
                    cancelled.append(run("agent_cancel", str(run_id), "--reason", "enough"))
                    return
                time.sleep(0.02)
        finally:
            from django.db import connections

            connections.close_all()

    helper = threading.Thread(target=cancel_when_running)
    helper.start()
    ran = run("agent_run", "slow", "--tool", "sleep", "--script", json.dumps(SLOW), "--json")
    helper.join()
    run_id = ran.lines[0]["run_id"]
    assert cancelled[0].code == 0 and cancelled[0].out.startswith(f"Run {run_id} cancelled")
    assert ran.code == 3
    steps = [line["step"] for line in ran.lines[1:-1]]
    assert steps == stored_steps(run_id) and steps[-1]["kind"] == "cancelled"
    assert steps[-1]["payload"]["boundary_sequence"] == steps[-2]["sequence"]
    assert (steps[-1]["payload"]["source"], steps[-1]["payload"]["reason"]) == ("cli", "enough")
    assert ran.lines[-1]["event"] == "cancelled" and ran.lines[-1]["cancel"]["source"] == "cli"


# transaction=True: the in-process executor runs the job on its own thread after commit.
@pytest.mark.django_db(transaction=True)
def test_agent_run_queued_follow_without_redis_completes():
    script = [{"delay": 0.05, "tool_calls": [{"name": "sleep", "arguments": {"seconds": 0.05}}]}, {"content": "q"}]
    ran = run(
        "agent_run", "queued", "--tool", "sleep", "--script", json.dumps(script), "--queued", "--follow", "--json"
    )
    assert waits.wait_local_idle()
    run_id = ran.lines[0]["run_id"]
    assert ran.code == 0 and ran.lines[0] == {"event": "started", "run_id": run_id}
    assert [line["step"] for line in ran.lines[1:-1]] == stored_steps(run_id)
    assert ran.lines[-1]["event"] == "done"


# transaction=True: the enqueue dispatches on commit, and the executor runs on another thread.
@pytest.mark.django_db(transaction=True)
def test_agent_run_queued_without_follow_prints_the_id_at_once():
    ran = run("agent_run", "queued", "--tool", "calculator", "--script", '[{"content": "later"}]', "--queued")
    assert waits.wait_local_idle()
    run_id = AgentRun.objects.get().pk
    assert ran.code == 0 and ran.out.splitlines() == [f"run {run_id} queued"]
    assert AgentRun.objects.get().status == RunStatus.COMPLETED


# transaction=True: the job is sent to Redis only once the row is committed.
@pytest.mark.django_db(transaction=True)
def test_agent_run_queued_on_redis_sends_a_job_carrying_only_the_id(redis_url):
    import redis
    from rq.job import Job

    with override_settings(REDIS_URL=redis_url, RQ_QUEUES={"default": {"URL": redis_url}}):
        ran = run("agent_run", "for a worker", "--queued", "--json")
    run_id = ran.lines[0]["run_id"]
    assert ran.code == 0 and ran.lines == [{"event": "started", "run_id": run_id}]
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.QUEUED
    job = Job.fetch(dispatch.job_id(run_id), connection=redis.Redis.from_url(redis_url))
    assert list(job.args) == [run_id]


# transaction=True: the dispatch happens in the on-commit hook.
@pytest.mark.django_db(transaction=True)
def test_agent_run_queued_with_unreachable_redis_exits_0_and_leaves_the_run_queued():
    url = "redis://127.0.0.1:1/11"
    with override_settings(REDIS_URL=url, RQ_QUEUES={"default": {"URL": url}}):
        ran = run("agent_run", "lost?", "--queued")
    row = AgentRun.objects.get()
    assert ran.code == 0 and f"run {row.pk} queued" in ran.out
    assert "once the queue is back" in ran.err
    assert (row.status, row.termination_reason) == (RunStatus.QUEUED, "")


# --- agent_cancel ------------------------------------------------------------------------------
@pytest.mark.django_db
def test_agent_cancel_queued_run_records_cli_source_and_reason():
    run_id = queued()
    ran = run("agent_cancel", str(run_id), "--reason", "not needed")
    row = AgentRun.objects.get(pk=run_id)
    assert ran.code == 0 and ran.out.splitlines() == [f"Run {run_id} cancelled; it was queued and will never execute."]
    assert (row.status, row.cancel_source, row.cancel_reason) == ("cancelled", "cli", "not needed")
    last = AgentRunEvent.objects.filter(run_id=run_id).latest("sequence")
    assert last.kind == "cancelled" and last.payload["source"] == "cli"


@pytest.mark.django_db
def test_agent_cancel_already_cancelled_is_exit_0_and_changes_nothing(runtime):
    run_id = queued()
    runtime.cancel(run_id, source="api")
    before = snapshot()
    ran = run("agent_cancel", str(run_id))
    assert ran.code == 0 and ran.out.splitlines() == [f"Run {run_id} was already cancelled; nothing changed."]
    assert snapshot() == before


@pytest.mark.parametrize("make, status", [(completed, "completed"), (failed, "failed")])
@pytest.mark.django_db
def test_agent_cancel_finished_run_exits_1_and_changes_nothing(runtime, make, status):
    run_id = make(runtime)
    before = snapshot()
    ran = run("agent_cancel", str(run_id))
    assert ran.code == 1 and ran.out.splitlines() == [f"Run {run_id} had already finished ({status}); nothing changed."]
    assert ran.err == "1 of 1 runs not cancelled (0 not found, 1 already finished)"
    assert snapshot() == before


@pytest.mark.django_db
def test_agent_cancel_unknown_id_exits_1_and_changes_nothing(runtime):
    completed(runtime)
    unknown = uuid.uuid4()
    before = snapshot()
    ran = run("agent_cancel", str(unknown))
    assert ran.code == 1 and ran.out.splitlines() == [f"Run {unknown} does not exist; nothing changed."]
    assert ran.err == "1 of 1 runs not cancelled (1 not found, 0 already finished)"
    assert snapshot() == before


@pytest.mark.parametrize("args", [[], ["--reason", "x"]])
@pytest.mark.django_db
def test_agent_cancel_malformed_id_exits_2_and_changes_nothing_even_beside_valid_ids(args):
    good = queued()
    before = snapshot()
    ran = run("agent_cancel", str(good), "not-a-uuid", *args)
    assert ran.code == 2 and ran.err == "not a run id: 'not-a-uuid'" and ran.out == ""
    assert snapshot() == before and AgentRun.objects.get(pk=good).status == RunStatus.QUEUED


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "give at least one run id"),
        (["--dry-run"], "--dry-run needs a selection"),
        (["--reason", "a\x00b", str(uuid.uuid4())], "--reason:"),
        (["--status", "bogus"], "--status: unknown bogus"),
        (["--older-than", "soon"], "--older-than: expected a duration"),
    ],
)
@pytest.mark.django_db
def test_agent_cancel_usage_errors_exit_2(args, message):
    queued()
    before = snapshot()
    ran = run("agent_cancel", *args)
    assert ran.code == 2 and ran.err.startswith(message)
    assert snapshot() == before


@pytest.mark.django_db
def test_agent_cancel_refuses_ids_with_bulk_selectors():
    run_id = queued()
    before = snapshot()
    ran = run("agent_cancel", str(run_id), "--status", "queued")
    assert ran.code == 2 and "not both" in ran.err
    assert snapshot() == before


@pytest.mark.django_db
def test_agent_cancel_mixed_ids_one_line_each_in_order_and_json(runtime):
    q, done, unknown = queued(), completed(runtime), uuid.uuid4()
    ran = run("agent_cancel", str(q), str(done), str(unknown), str(q), "--json")
    assert ran.code == 1 and "2 of 3 runs not cancelled (1 not found, 1 already finished)" == ran.err
    assert [(line["event"], line["run_id"], line["outcome"]) for line in ran.lines] == [
        ("cancel", str(q), "cancelled"),
        ("cancel", str(done), "already_finished"),
        ("cancel", str(unknown), "not_found"),
    ]
    assert ran.lines[0]["previous_status"] == "queued" and ran.lines[0]["stops_at_next_boundary"] is False
    assert AgentRun.objects.get(pk=q).status == RunStatus.CANCELLED


@pytest.mark.django_db
def test_agent_cancel_running_run_says_it_stops_at_the_next_boundary():
    row = store.begin(RunRequest.from_mapping({"prompt": "p"}).row_fields())
    ran = run("agent_cancel", str(row.pk))
    assert (
        ran.code == 0
        and ran.out.strip()
        == f"Run {row.pk} cancelled; it was executing: the step in flight is interrupted and recorded, then it stops."
    )


@pytest.mark.django_db
def test_agent_cancel_bulk_by_status_dry_run_then_for_real(runtime):
    q1, q2, w, done = queued(), queued(), waiting(runtime), completed(runtime)
    before = snapshot()
    ran = run(
        "agent_cancel",
        "--status",
        "queued",
        "--status",
        "waiting_for_approval",
        "--status",
        "completed",
        "--dry-run",
        "--json",
    )
    assert ran.code == 0 and ran.lines == [
        {
            "event": "bulk_cancel",
            "dry_run": True,
            "cancelled_total": 3,
            "cancelled": {"queued": 2, "waiting_for_approval": 1},
            "unchanged": {"completed": 1},
        }
    ]
    assert snapshot() == before
    ran = run("agent_cancel", "--status", "queued", "--status", "waiting_for_approval", "--reason", "sweep")
    assert ran.code == 0
    assert ran.out.splitlines() == ["3 runs cancelled."]
    statuses = dict(AgentRun.objects.values_list("pk", "status"))
    assert [statuses[k] for k in (q1, q2, w, done)] == ["cancelled", "cancelled", "cancelled", "completed"]
    assert AgentRun.objects.filter(cancel_source="cli", cancel_reason="sweep").count() == 3
    for run_id in (q1, q2, w):
        assert AgentRunEvent.objects.filter(run_id=run_id).latest("sequence").kind == "cancelled"


@pytest.mark.django_db
def test_agent_cancel_bulk_older_than_selects_by_creation_time(runtime):
    old_q, old_done, new_q = queued(), completed(runtime), queued()
    AgentRun.objects.filter(pk__in=[old_q, old_done]).update(created_at=timezone.now() - timedelta(hours=3))
    ran = run("agent_cancel", "--older-than", "2h", "--dry-run")
    assert ran.out.splitlines() == ["1 run will be cancelled, 1 run already finished."]
    ran = run("agent_cancel", "--older-than", "2h")
    assert ran.code == 0
    statuses = dict(AgentRun.objects.values_list("pk", "status"))
    assert (statuses[old_q], statuses[old_done], statuses[new_q]) == ("cancelled", "completed", "queued")
    assert run("agent_cancel", "--older-than", "1d").out.splitlines() == [
        "No run matched the selection; nothing changed."
    ]


# --- agent_approve -----------------------------------------------------------------------------
@pytest.mark.django_db
def test_agent_approve_resumes_here_and_streams(runtime):
    run_id = waiting(runtime)
    seen = AgentRunEvent.objects.filter(run_id=run_id).count()
    ran = run("agent_approve", str(run_id), "--approve", "--json")
    steps = [line["step"] for line in ran.lines[1:-1]]
    assert ran.code == 0 and ran.lines[0] == {"event": "started", "run_id": str(run_id)}
    assert steps == stored_steps(run_id)[seen:]
    assert [s["kind"] for s in steps] == ["approval", "tool", "request", "llm"]
    assert steps[0]["payload"]["approved"] is True and Note.objects.get().title == "t"
    assert ran.lines[-1]["event"] == "done"


@pytest.mark.django_db
def test_agent_approve_deny_feeds_the_denial_back(runtime):
    run_id = waiting(runtime)
    ran = run("agent_approve", str(run_id), "--deny")
    lines = ran.out.splitlines()
    assert ran.code == 0 and lines[0] == f"run {run_id} resumed (denied)"
    assert "denied" in lines[1] and lines[-1].startswith(f"run {run_id} completed")
    assert not Note.objects.exists()


@pytest.mark.django_db
def test_agent_approve_records_who_decided_and_why(runtime, monkeypatch):
    run_id = waiting(runtime)
    ran = run("agent_approve", str(run_id), "--deny", "--by", "carol", "--reason", "not this week")
    assert ran.code == 0
    step = AgentRunEvent.objects.get(run_id=run_id, kind="approval").payload
    assert (step["approved"], step["by"], step["reason"]) == (False, "carol", "not this week")
    monkeypatch.setenv("SUDO_USER", "dave")  # no --by: the OS user, as agent_cancel records it
    again = waiting(runtime)
    assert run("agent_approve", str(again), "--approve", "--queued").code == 0
    step = AgentRunEvent.objects.filter(run_id=again, kind="approval").first()
    decided = step.payload if step else AgentRun.objects.get(pk=again).request_payload["resume"]
    assert decided["by"] == "dave" and "reason" not in decided


@pytest.mark.django_db
def test_agent_approve_refuses_a_reason_it_cannot_record(runtime):
    run_id = waiting(runtime)
    before = snapshot()
    ran = run("agent_approve", str(run_id), "--approve", "--reason", "x" * 5000)
    assert ran.code == 2 and ran.err.startswith("--reason: the reason is longer than")
    ran = run("agent_approve", str(run_id), "--approve", "--reason", "a\x00b")
    assert (ran.code, ran.err) == (2, "--reason: the reason contains a NUL character")
    assert snapshot() == before and AgentRun.objects.get(pk=run_id).status == "waiting_for_approval"


@pytest.mark.django_db
def test_agent_approve_refusals_change_nothing(runtime):
    done, gone, cancelled = completed(runtime), uuid.uuid4(), waiting(runtime)
    runtime.cancel(cancelled, source="api")
    before = snapshot()
    ran = run("agent_approve", str(done), "--approve")
    assert (ran.code, ran.err, ran.out) == (
        1,
        f"Run {done} is completed, not waiting for approval; nothing changed.",
        "",
    )
    ran = run("agent_approve", str(cancelled), "--deny")
    assert (ran.code, ran.err) == (1, f"Run {cancelled} is cancelled, not waiting for approval; nothing changed.")
    ran = run("agent_approve", str(gone), "--approve")
    assert (ran.code, ran.err) == (1, f"run {gone} not found")
    ran = run("agent_approve", "12345", "--approve")
    assert (ran.code, ran.err) == (2, "not a run id: '12345'")
    with pytest.raises(CommandError):  # argparse: one of --approve / --deny is required
        call_command("agent_approve", str(done), stdout=StringIO())
    assert snapshot() == before


# transaction=True: the decision is stored and the in-process executor resumes the run on its thread.
@pytest.mark.django_db(transaction=True)
def test_agent_approve_queued_follow_resumes_in_a_worker(runtime):
    run_id = waiting(runtime)
    seen = AgentRunEvent.objects.filter(run_id=run_id).count()
    ran = run("agent_approve", str(run_id), "--approve", "--queued", "--follow", "--json")
    assert waits.wait_local_idle()
    steps = [line["step"] for line in ran.lines[1:-1]]
    assert ran.code == 0 and steps == stored_steps(run_id)[seen:] and steps[0]["kind"] == "approval"
    assert ran.lines[-1]["event"] == "done" and Note.objects.count() == 1


# --- agent_events ------------------------------------------------------------------------------
@pytest.mark.django_db
def test_agent_events_prints_the_stream_after_n(runtime):
    run_id = failed(runtime)
    ran = run("agent_events", str(run_id), "--json")
    assert ran.code == 0 and [line["step"] for line in ran.lines[1:-1]] == stored_steps(run_id)
    assert ran.lines[-1]["event"] == "failed"
    ran = run("agent_events", str(run_id), "--after", "1", "--json")
    assert [line["step"]["sequence"] for line in ran.lines[1:-1]] == [2]
    human = run("agent_events", str(run_id)).out.splitlines()
    assert human[0] == f"run {run_id} (failed)" and len(human) == 2 + len(stored_steps(run_id))


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["nope"], 2, "not a run id: 'nope'"),
        ([str(uuid.UUID(int=7)), "--after", "-2"], 2, "--after: a sequence number, -1 or more"),
        ([str(uuid.UUID(int=7))], 1, f"run {uuid.UUID(int=7)} not found"),
    ],
)
@pytest.mark.django_db
def test_agent_events_errors(args, code, message):
    ran = run("agent_events", *args)
    assert (ran.code, ran.err) == (code, message)


@pytest.mark.django_db
def test_agent_events_follow_on_a_waiting_run_returns_at_once_with_4(runtime):
    run_id = waiting(runtime)
    ran = run("agent_events", str(run_id), "--follow", "--json")
    assert ran.code == 4 and ran.lines[-1]["event"] == "awaiting_approval"


# transaction=True: the run executes on another thread while the command follows it.
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("cancel", [False, True])
def test_agent_events_follow_tails_a_live_run_to_its_end(runtime, cancel):
    started = threading.Event()
    holder: dict[str, Any] = {}

    def execute() -> None:
        from django.db import connections

        def on_step(step: dict[str, Any]) -> None:
            holder.setdefault("run_id", step["run_id"])
            started.set()
            if cancel and step["kind"] == "tool":
                runtime.cancel(step["run_id"], source="api")

        try:
            holder["result"] = runtime.run(
                {"prompt": "p", "tools": ["sleep"], "script": SLOW[:3] + SLOW[-1:]}, on_step=on_step
            )
        finally:
            connections.close_all()

    worker = threading.Thread(target=execute)
    worker.start()
    assert started.wait(30)
    ran = run("agent_events", holder["run_id"], "--follow", "--json")
    worker.join()
    steps = [line["step"] for line in ran.lines[1:-1]]
    assert steps == stored_steps(holder["run_id"]) and [s["sequence"] for s in steps] == list(range(len(steps)))
    if cancel:
        assert ran.code == 3 and steps[-1]["kind"] == "cancelled" and ran.lines[-1]["event"] == "cancelled"
    else:
        assert ran.code == 0 and ran.lines[-1]["event"] == "done"


# transaction=True: the follower runs on a thread so that a hang fails the test instead of the suite.
@pytest.mark.django_db(transaction=True)
def test_agent_events_follow_ends_on_a_cancel_no_process_ever_acknowledged(runtime):
    row = store.begin(RunRequest.from_mapping({"prompt": "p"}).row_fields())  # its process "died"
    runtime.cancel(row.pk, source="api")
    AgentRun.objects.filter(pk=row.pk).update(cancel_requested_at=timezone.now() - timedelta(minutes=10))
    ran: list[Ran] = []

    def follow() -> None:
        from django.db import connections

        try:
            ran.append(run("agent_events", str(row.pk), "--follow", "--json"))
        finally:
            connections.close_all()

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    follower.join(timeout=30)
    assert ran and ran[0].code == 3 and ran[0].lines[-1]["event"] == "cancelled"
