"""Liveness with real ``manage.py rqworker`` processes: workers killed, frozen and shut down mid-run,
``manage.py agent_reap`` run as a child process, retries scheduled by a real RQ scheduler against
the loopback chat-completions server.

Every test needs ``transaction=True``: worker, reaper and test processes read and write the test
database over their own connections, so every row must be committed. Workers get the test Redis
as ``REDIS_URL``, a 2-second lease (``NRLLM_LEASE_SECONDS``, also given to the reaper child, the
only process here that reaps) and journal each model call and tool start with their pid
(``NRLLM_CALL_JOURNAL``): that pid is the work horse executing the run.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from django.utils import timezone

from nrllm_agents.executors import dispatch
from nrllm_agents.executors.rq_queue import JOB_FUNCTION
from nrllm_agents.models import AgentRun, AgentRunEvent, Note, RunStatus
from nrllm_agents.presentation.presenters import stream_finished
from nrllm_agents.testing.chat_server import ChatCompletionServer
from tests.conftest import manage
from tests.e2e.processes import Workers, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

LEASE_SECONDS = "2"
SLOW_NOTE = {"slow_note": "nrllm_agents.testing.tools.SlowNote"}
API_KEY = "sk-live-secret-4242-never-logged"


def calc(expr: str) -> dict[str, Any]:
    return {"name": "calculator", "arguments": {"expression": expr}}


def sleep(seconds: float) -> dict[str, Any]:
    return {"name": "sleep", "arguments": {"seconds": seconds}}


def scripted(*turns: dict[str, Any]) -> dict[str, Any]:
    return {"prompt": "liveness drill", "tools": ["calculator", "sleep", "slow_note"], "script": list(turns)}


# --- fixtures and helpers --------------------------------------------------------------------
@pytest.fixture
def queue(settings, redis_url):
    """This process dispatches to the test Redis and knows the fixture tool; returns the queue."""
    import django_rq

    settings.REDIS_URL = redis_url
    settings.RQ_QUEUES = {"default": {"URL": redis_url}}
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "TOOLS": {**settings.NRLLM_AGENTS.get("TOOLS", {}), **SLOW_NOTE}}
    return django_rq.get_queue("default")


@pytest.fixture
def worker_env(child_env, redis_url) -> dict[str, str]:
    return {
        **child_env,
        "REDIS_URL": redis_url,
        "NRLLM_LEASE_SECONDS": LEASE_SECONDS,
        "NRLLM_EXTRA_TOOLS": ",".join(f"{k}={v}" for k, v in SLOW_NOTE.items()),
    }


@pytest.fixture
def start_workers(worker_env, tmp_path) -> Callable[..., Workers]:
    """Start real rqworker processes; every one of them is stopped after the test."""
    started: list[Workers] = []

    def start(count: int = 1, *, env: dict[str, str] | None = None, extra_args: tuple[str, ...] = ()) -> Workers:
        workers = Workers(env or worker_env, count=count, log_dir=tmp_path / "worker-logs", extra_args=extra_args)
        started.append(workers)
        return workers.start()

    yield start
    for workers in started:
        workers.stop()


def agent_reap(env: dict[str, str], *args: str) -> str:
    """``manage.py agent_reap`` in a child process; returns its summary line."""
    proc = manage("agent_reap", *args, env=env)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, (out, err)
    return out.strip().splitlines()[0]  # the lease line; the second reports the queued sweep


def journal(env: dict[str, str], run_id: Any) -> list[dict[str, Any]]:
    path = Path(env["NRLLM_CALL_JOURNAL"])
    # A line a worker is still appending has no newline yet: leave it for the next read.
    lines = [json.loads(x) for x in path.read_text().split("\n")[:-1] if x.strip()] if path.exists() else []
    return [line for line in lines if line.get("run_id") == str(run_id)]


def horse_of(env: dict[str, str], run_id: Any) -> int:
    """The pid of the work horse that started the run's latest model call or tool."""
    return wait_for(lambda: journal(env, run_id), what="the run to start")[-1]["pid"]


def sleeping(env: dict[str, str], run_id: Any) -> bool:
    """The run's latest start is the sleep tool (the step cannot be recorded before it ends)."""
    starts = journal(env, run_id)
    return bool(starts) and starts[-1]["name"] == "sleep"


def events(run_id: Any) -> list[AgentRunEvent]:
    return list(AgentRunEvent.objects.filter(run_id=run_id).order_by("sequence"))


def recorded(run_id: Any, kind: str, round_: int) -> bool:
    return AgentRunEvent.objects.filter(run_id=run_id, kind=kind, round=round_).exists()


def finished(run_id: Any) -> bool:
    return stream_finished(AgentRun.objects.get(pk=run_id))


def lease_expired(run_id: Any) -> bool:
    run = AgentRun.objects.get(pk=run_id)
    return run.status == RunStatus.RUNNING and run.lease_expires is not None and run.lease_expires < timezone.now()


def results_of(queue: Any, job_id: str) -> list[Any]:
    from rq.results import Result

    job = queue.fetch_job(job_id)
    return [] if job is None else [r.return_value for r in Result.all(job)]


def frozen(run_id: Any) -> tuple[list[tuple[Any, ...]], dict[str, Any]]:
    """Everything a segment could write: the stream and the row."""
    stream = [(e.pk, e.sequence, e.kind, e.round, e.payload, e.created_at) for e in events(run_id)]
    return stream, AgentRun.objects.filter(pk=run_id).values().get()


def assert_continued_once(run_id: Any, script: list[dict[str, Any]]) -> list[AgentRunEvent]:
    """The stream is contiguous, and every tool call the model asked for ran exactly once."""
    stream = events(run_id)
    assert [e.sequence for e in stream] == list(range(len(stream)))
    asked = [c["id"] for e in stream if e.kind == "llm" for c in e.payload["tool_calls"]]
    ran = [e.payload["call_id"] for e in stream if e.kind == "tool"]
    assert ran == asked and len(set(ran)) == len(ran), (asked, ran)
    # One recorded answer per scripted turn, in order: no model turn was recorded twice.
    answers = [e.payload["content"] or [c["name"] for c in e.payload["tool_calls"]] for e in stream if e.kind == "llm"]
    assert answers == [t.get("content") or [c["name"] for c in t["tool_calls"]] for t in script]
    return stream


# --- a worker killed mid-run -----------------------------------------------------------------
KILLED = [
    {"delay": 0.1, "tool_calls": [calc("1 + 1")]},
    {"delay": 0.1, "tool_calls": [sleep(1.5), calc("2 * 3")]},  # killed during this sleep
    {"delay": 0.1, "tool_calls": [calc("3 - 1")]},
    {"delay": 0.1, "content": "all done"},
]


def test_a_killed_worker_s_run_is_reaped_and_finished_by_another_worker_without_gap_or_duplicate(
    runtime, queue, start_workers, worker_env
):
    workers = start_workers(2)
    run_id = runtime.enqueue(scripted(*KILLED))
    wait_for(lambda: sleeping(worker_env, run_id), what="the sleep of the second turn to start")
    victim = workers.index_of_horse(horse_of(worker_env, run_id))
    workers.kill(victim)  # SIGKILL, work horse included, in the middle of the sleep

    before = frozen(run_id)[0]
    assert [kind for _, _, kind, *_ in before] == ["request", "llm", "tool", "request", "llm"]
    assert AgentRun.objects.get(pk=run_id).status == RunStatus.RUNNING  # nobody settles for the dead
    wait_for(lambda: lease_expired(run_id), timeout=30, what="the dead worker's lease to expire")
    assert agent_reap(worker_env) == "1 requeued, 0 cancel acknowledged, 0 skipped (alive)"
    wait_for(lambda: finished(run_id), timeout=60, what="the other worker to finish the run")

    run = AgentRun.objects.get(pk=run_id)
    assert (run.status, run.final_text, run.attempts) == (RunStatus.COMPLETED, "all done", 1)
    stream = assert_continued_once(run_id, KILLED)
    assert frozen(run_id)[0][: len(before)] == before  # the dead segment's steps, untouched
    assert stream[len(before)].sequence == len(before) and stream[len(before)].kind == "tool"  # the next one
    assert stream[len(before)].payload["call_id"] == "call_2_1"  # the interrupted sleep, now recorded once
    # Only the sleep in flight started twice (once in each horse); nothing recorded ran again.
    starts = [(s["pid"], s["what"], s["name"]) for s in journal(worker_env, run_id)]
    first, second = {pid for pid, *_ in starts[:4]}, {pid for pid, *_ in starts[4:]}
    assert len(first) == len(second) == 1 and first != second
    assert [s[1:] for s in starts] == [
        ("model", "scripted-demo"),
        ("tool", "calculator"),
        ("model", "scripted-demo"),
        ("tool", "sleep"),  # killed here
        ("tool", "sleep"),
        ("tool", "calculator"),
        ("model", "scripted-demo"),
        ("tool", "calculator"),
        ("model", "scripted-demo"),
    ]
    continued = queue.fetch_job(dispatch.job_id(run_id, len(before)))  # the job the reaper dispatched
    # RQ stores the job's result after the job returns, a moment after the run's row settles.
    wait_for(lambda: results_of(queue, continued.id), timeout=10, what="the continued job's result")
    assert results_of(queue, continued.id) == ["completed"]
    assert continued.worker_name == workers.names[1 - victim]


def test_with_nothing_scheduled_the_surviving_worker_reaps_a_killed_worker_s_run_by_itself(
    runtime, queue, start_workers, worker_env
):
    """No ``agent_reap``: the surviving worker's own maintenance requeues the run once the dead
    worker's lease lapsed, and a worker finishes it, every tool call still run once."""
    workers = start_workers(2, env={**worker_env, "NRLLM_MAINTENANCE_SECONDS": "1"})
    run_id = runtime.enqueue(scripted(*KILLED))
    wait_for(lambda: sleeping(worker_env, run_id), what="the sleep of the second turn to start")
    workers.kill(workers.index_of_horse(horse_of(worker_env, run_id)))
    wait_for(lambda: finished(run_id), timeout=60, what="a worker to reap the run and finish it")
    run = AgentRun.objects.get(pk=run_id)
    assert (run.status, run.final_text, run.attempts) == (RunStatus.COMPLETED, "all done", 1)
    assert_continued_once(run_id, KILLED)


# --- a frozen worker (a zombie) --------------------------------------------------------------
FROZEN = [
    {"delay": 0.1, "tool_calls": [calc("1 + 1")]},
    {"delay": 0.1, "tool_calls": [sleep(1.5)]},  # frozen during this sleep
    {"delay": 0.1, "tool_calls": [calc("2 + 2")]},
    {"delay": 0.1, "content": "finished by the other one"},
]


def is_stopped(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2] in "Tt"


def test_a_zombie_worker_that_lost_its_lease_writes_nothing_when_it_wakes_up(runtime, queue, start_workers, worker_env):
    workers = start_workers(2)
    run_id = runtime.enqueue(scripted(*FROZEN))
    wait_for(lambda: sleeping(worker_env, run_id), what="the sleep of the second turn to start")
    zombie = horse_of(worker_env, run_id)
    zombie_worker = workers.index_of_horse(zombie)
    os.kill(zombie, signal.SIGSTOP)  # frozen in the sleep, between two database writes
    try:
        wait_for(lambda: is_stopped(zombie), what="the work horse to stop")
        wait_for(lambda: lease_expired(run_id), timeout=30, what="the frozen worker's lease to expire")
        assert agent_reap(worker_env) == "1 requeued, 0 cancel acknowledged, 0 skipped (alive)"
        wait_for(lambda: finished(run_id), timeout=60, what="the other worker to finish the run")
        done = frozen(run_id)
        zombie_starts = [s for s in journal(worker_env, run_id) if s["pid"] == zombie]
    finally:
        os.kill(zombie, signal.SIGCONT)

    # Awake again, the zombie finishes its sleep and reaches a boundary: its renewal matches no
    # row, so it stops there. Its job's return value says so.
    first_job = dispatch.job_id(run_id)
    assert wait_for(lambda: results_of(queue, first_job), what="the zombie's job to end") == ["lease_lost"]
    assert frozen(run_id) == done  # not a step, not a settle, not a counter
    assert done[1]["status"] == RunStatus.COMPLETED and done[1]["final_text"] == "finished by the other one"
    assert [s for s in journal(worker_env, run_id) if s["pid"] == zombie] == zombie_starts  # started nothing
    assert_continued_once(run_id, FROZEN)
    workers.kill(zombie_worker)


# --- a worker killed during a non-idempotent tool --------------------------------------------
def test_a_run_killed_during_a_non_idempotent_tool_waits_in_doubt_and_is_never_repeated(
    runtime, queue, start_workers, worker_env
):
    """The default (``IN_DOUBT = "wait"``): the reaper hands the run back with its stamp, a worker
    suspends it with the call named, and a person's "it happened" completes it without the call
    being made again. ``IN_DOUBT = "fail"`` dead-letters it instead."""
    workers = start_workers(2)
    run_id = runtime.enqueue(
        scripted(
            {"tool_calls": [{"name": "slow_note", "arguments": {"title": "exactly once", "seconds": 10}}]},
            {"content": "noted"},
        )
    )
    wait_for(lambda: Note.objects.filter(run_id=run_id).exists(), what="the note to be written")
    workers.kill(workers.index_of_horse(horse_of(worker_env, run_id)))  # the effect done, its step not recorded

    stamped = AgentRun.objects.get(pk=run_id)
    assert stamped.status == RunStatus.RUNNING and stamped.pending_effect["call"]["name"] == "slow_note"
    wait_for(lambda: lease_expired(run_id), timeout=30, what="the dead worker's lease to expire")
    assert agent_reap(worker_env) == "1 requeued (1 in doubt), 0 cancel acknowledged, 0 skipped (alive)"
    wait_for(
        lambda: AgentRun.objects.get(pk=run_id).status == RunStatus.WAITING_FOR_APPROVAL,
        timeout=60,
        what="the other worker to suspend the run in doubt",
    )
    run = AgentRun.objects.get(pk=run_id)
    assert run.suspended_state["in_doubt"]["call"]["name"] == "slow_note" and run.pending_effect is None
    assert runtime.resolve(run_id, True, result={"note": "seen"}, queued=True).outcome == "queued"
    wait_for(lambda: finished(run_id), timeout=60, what="the run to end after the decision")
    run = AgentRun.objects.get(pk=run_id)
    assert (run.status, run.final_text) == (RunStatus.COMPLETED, "noted")
    assert Note.objects.filter(run_id=run_id).count() == 1  # never repeated
    assert [(s["what"], s["name"]) for s in journal(worker_env, run_id)] == [
        ("model", "scripted-demo"),
        ("tool", "slow_note"),
        ("model", "scripted-demo"),
    ]
    assert [e.kind for e in events(run_id)] == ["request", "llm", "approval", "tool", "request", "llm"]


def test_with_in_doubt_fail_a_run_killed_during_a_non_idempotent_tool_is_dead_lettered(
    runtime, queue, start_workers, worker_env
):
    env = {**worker_env, "NRLLM_IN_DOUBT": "fail"}
    workers = start_workers(2, env=env)
    run_id = runtime.enqueue(
        scripted(
            {"tool_calls": [{"name": "slow_note", "arguments": {"title": "exactly once", "seconds": 10}}]},
            {"content": "never"},
        )
    )
    wait_for(lambda: Note.objects.filter(run_id=run_id).exists(), what="the note to be written")
    workers.kill(workers.index_of_horse(horse_of(worker_env, run_id)))
    wait_for(lambda: lease_expired(run_id), timeout=30, what="the dead worker's lease to expire")
    assert agent_reap(env) == "0 requeued, 1 dead-lettered (not_retryable), 0 cancel acknowledged, 0 skipped (alive)"
    run = AgentRun.objects.get(pk=run_id)
    assert (run.status, run.termination_reason, run.error_class) == (RunStatus.FAILED, "not_retryable", "LeaseExpired")
    # Another worker is available: even a stray job for the run executes nothing.
    stray = queue.enqueue(JOB_FUNCTION, str(run_id), job_id=f"stray-{run_id}").id
    assert wait_for(lambda: results_of(queue, stray), what="the stray job") == [None]
    assert Note.objects.filter(run_id=run_id).count() == 1
    assert [e.kind for e in events(run_id)] == ["request", "llm"]


# --- graceful shutdown -----------------------------------------------------------------------
MID_RUN = [
    {"delay": 0.2, "tool_calls": [calc("1 + 1")]},
    {"delay": 1.0, "tool_calls": [sleep(0.2)]},  # SIGTERM during this model call
    {"delay": 0.2, "tool_calls": [calc("2 + 2")]},
    {"delay": 0.2, "content": "handed over"},
]
FINAL_ANSWER = [
    {"delay": 0.2, "tool_calls": [calc("1 + 1")]},
    {"delay": 1.0, "content": "answered just before the deploy"},  # SIGTERM during this model call
]


@pytest.mark.parametrize("script", [MID_RUN, FINAL_ANSWER], ids=["mid-run", "during-the-final-answer"])
def test_sigterm_hands_the_run_back_and_another_worker_completes_it(runtime, queue, start_workers, worker_env, script):
    first = start_workers(1)
    run_id = runtime.enqueue(scripted(*script))
    wait_for(lambda: recorded(run_id, "request", 2), what="the second model call to start")
    first.terminate(0)  # a deploy: warm shutdown of the worker process alone

    assert first.wait_exit(0) == 0  # the worker left without waiting for the run to finish
    assert results_of(queue, dispatch.job_id(run_id)) == ["requeued"]
    handed = AgentRun.objects.get(pk=run_id)
    assert (handed.status, handed.termination_reason, handed.attempts) == (RunStatus.QUEUED, "", 0)
    assert (handed.claimed_by, handed.lease_expires, handed.cancel_requested_at) == ("", None, None)
    stopped_at = len(events(run_id))
    assert [e.kind for e in events(run_id)][-2:] == ["request", "llm"]  # stopped at the boundary after the call
    next_job = dispatch.job_id(run_id, stopped_at)
    assert queue.job_ids == [next_job]  # waiting for any worker

    second = start_workers(1)
    assert wait_for(lambda: results_of(queue, next_job), timeout=60, what="the next segment") == ["completed"]
    assert queue.fetch_job(next_job).worker_name == second.names[0]
    run = AgentRun.objects.get(pk=run_id)
    assert (run.status, run.final_text) == (RunStatus.COMPLETED, script[-1]["content"])
    stream = assert_continued_once(run_id, script)
    assert stream[stopped_at - 1].kind == "llm" and len(stream) >= stopped_at
    # The model was asked once per turn, across both workers.
    assert [s["what"] for s in journal(worker_env, run_id)].count("model") == len(script)


# --- retries through the RQ scheduler --------------------------------------------------------
OPENAI = {"prompt": "hi", "provider": "openai", "model": "test-model", "tools": []}
BASE_DELAY = 1.5  # two delays, 1.5 s then 3 s: whole seconds in RQ's registry cannot blur them


class ScheduledTap:
    """Watches Redis (``MONITOR``) for jobs put in the scheduled registry: job id -> score.

    The score is the epoch second RQ may enqueue the job at (``floor(dispatch time + delay)``).
    """

    def __init__(self, url: str, key: str) -> None:
        self.url, self.key = url, key
        self.db = redis.Redis.from_url(url).connection_pool.connection_kwargs.get("db", 0)
        self.scores: dict[str, int] = {}
        self._token = f"stop-tap-{os.getpid()}-{id(self)}"
        self._monitor: Any = None
        self._thread = threading.Thread(target=self._listen, daemon=True)

    def __enter__(self) -> ScheduledTap:
        self._monitor = redis.Redis.from_url(self.url).monitor()
        self._monitor.__enter__()
        self._thread.start()
        return self

    def _listen(self) -> None:
        while True:
            raw = self._monitor.connection.read_response()
            line = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
            if self._token in line:
                return
            match = re.match(r"[\d.]+ \[(\d+) [^\]]*\] (.*)", line)
            args = re.findall(r'"((?:[^"\\]|\\.)*)"', match.group(2)) if match else []
            if match and int(match.group(1)) == self.db and args[:2] == ["ZADD", self.key]:
                self.scores[args[3]] = int(args[2])

    def __exit__(self, *exc: object) -> None:
        redis.Redis.from_url(self.url).echo(self._token)
        self._thread.join(10)
        self._monitor.__exit__()


@pytest.fixture
def model_env(worker_env) -> dict[str, str]:
    return {
        **worker_env,
        "OPENAI_API_KEY": API_KEY,
        "NRLLM_MAX_ATTEMPTS": "2",
        "NRLLM_RETRY_BASE_SECONDS": str(BASE_DELAY),
        "NRLLM_LOG_LEVEL": "DEBUG",
    }


def assert_secret_kept(run_id: Any, workers: Workers) -> None:
    row = AgentRun.objects.filter(pk=run_id).values().get()
    assert API_KEY not in json.dumps(row, default=str)
    assert API_KEY not in json.dumps([e.payload for e in events(run_id)])
    log = "".join(workers.log_text(name) for name in workers.names)
    assert log and API_KEY not in log


def test_transient_model_failures_retry_with_growing_delays_until_the_budget(
    runtime, queue, start_workers, model_env, redis_url
):
    from rq.job import Job

    with ChatCompletionServer() as server:
        server.queue(*[{"status": 503, "error": "overloaded, try later"}] * 3)
        workers = start_workers(
            1, env={**model_env, "OPENAI_BASE_URL": server.base_url}, extra_args=("--with-scheduler",)
        )
        with ScheduledTap(redis_url, queue.scheduled_job_registry.key) as tap:
            run_id = runtime.enqueue(OPENAI)
            wait_for(lambda: finished(run_id), timeout=60, what="the retries to end")
        asked = list(server.request_headers)

    run = AgentRun.objects.get(pk=run_id)
    assert (run.status, run.termination_reason, run.attempts) == (RunStatus.FAILED, "retries_exhausted", 2)
    assert "503" in run.error_message
    recorded = events(run_id)  # each attempt: its request, then its failure as a failed llm step
    assert [(e.kind, e.sequence) for e in recorded] == [(k, n) for n, k in enumerate(["request", "llm"] * 3)]
    assert all(e.payload["failed"] and "(HTTP 503)" in e.payload["error"] for e in recorded if e.kind == "llm")
    requests = [e for e in recorded if e.kind == "request"]
    assert len(asked) == 3 and all(h["authorization"] == f"Bearer {API_KEY}" for h in asked)
    jobs = [dispatch.job_id(run_id, n) for n in (0, 2, 4)]  # named by the steps recorded before each
    assert [results_of(queue, j) for j in jobs] == [["requeued"], ["requeued"], ["failed"]]
    # The first job was enqueued at once; each retry went through the scheduler.
    assert sorted(tap.scores) == jobs[1:]
    for attempt, job_id in enumerate(jobs[1:]):
        job = Job.fetch(job_id, connection=queue.connection)
        delay = BASE_DELAY * 2**attempt  # what the runtime asked RQ for
        # RQ stores floor(dispatch time + delay), and the job is created right after the dispatch
        # time: the stored second lies at most one second (plus that instant) below created_at + delay.
        offset = tap.scores[job_id] - job.created_at.timestamp()
        assert delay - 1.5 < offset <= delay + 0.001, (attempt, offset)
        # Ordering: failed attempt, then the retry scheduled, released, and only then asked again.
        assert requests[attempt].created_at <= job.created_at
        assert tap.scores[job_id] <= job.enqueued_at.timestamp() <= requests[attempt + 1].created_at.timestamp()
    offsets = [tap.scores[j] - Job.fetch(j, connection=queue.connection).created_at.timestamp() for j in jobs[1:]]
    assert offsets[0] < offsets[1]  # the delay grew: (0, 1.5] then (1.5, 3]
    assert_secret_kept(run_id, workers)


def test_an_unauthorized_model_server_dead_letters_at_once(runtime, queue, start_workers, model_env):
    with ChatCompletionServer(api_key="sk-the-right-one") as server:  # ours is refused: 401
        server.queue({"content": "never served"})
        workers = start_workers(1, env={**model_env, "OPENAI_BASE_URL": server.base_url})
        run_id = runtime.enqueue(OPENAI)
        wait_for(lambda: finished(run_id), timeout=60, what="the run to end")
        asked = len(server.requests)

    run = AgentRun.objects.get(pk=run_id)
    assert (run.status, run.termination_reason, run.attempts) == (RunStatus.FAILED, "not_retryable", 0)
    assert "401" in run.error_message
    assert [e.kind for e in events(run_id)] == ["request", "llm"] and asked == 1
    assert "OPENAI_API_KEY" in events(run_id)[1].payload["error"]  # what to set
    assert results_of(queue, dispatch.job_id(run_id)) == ["failed"]
    assert queue.scheduled_job_registry.get_job_ids() == [] and queue.job_ids == []  # no retry anywhere
    assert_secret_kept(run_id, workers)
