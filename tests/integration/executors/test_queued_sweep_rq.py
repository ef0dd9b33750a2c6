"""Issue 32 finding 13: one queued run whose job RQ cannot delete held back the recovery of
every queued run behind it.

A worker SIGKILLed between dequeuing a job and claiming its row leaves, for about a minute, the
job ``started`` with its entry in the executions registry but no execution hash; ``Job.delete``
then raises ``ValueError``. The sweep took that for an outage and stopped at the oldest run, pass
after pass, and ``agent_reap`` exited 1 while Redis was up. These tests build that state in a
real Redis and run the real sweep and the real command.
"""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from nrllm_agents import executors, store
from nrllm_agents.executors import dispatch, recovery, rq_queue
from nrllm_agents.models import AgentRun, RunStatus
from nrllm_agents.validation.run_request import RunRequest

pytestmark = pytest.mark.django_db

SCRIPT = [{"content": "done"}]


@pytest.fixture
def rq(settings, redis_url):
    import django_rq

    settings.REDIS_URL = redis_url
    settings.RQ_QUEUES = {"default": {"URL": redis_url}}
    settings.NRLLM_AGENTS = {**settings.NRLLM_AGENTS, "EXECUTOR": "rq"}
    queue = django_rq.get_queue("default")
    queue.connection.flushdb()
    yield queue
    queue.connection.flushdb()


def stale(minutes: int) -> AgentRun:
    """A queued run created ``minutes`` ago, never dispatched."""
    req = RunRequest.from_mapping({"prompt": f"stale {minutes}", "script": SCRIPT})
    run = store.create_queued(req.row_fields(), req.as_dict())
    AgentRun.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(minutes=minutes))
    return run


def half_gone_job(queue, run: AgentRun) -> str:
    """The state a worker killed mid-dequeue leaves: the job started by a worker that is gone,
    listed in its executions registry, the execution's own hash already expired."""
    from rq.executions import Execution
    from rq.job import Job, JobStatus
    from rq.registry import StartedJobRegistry

    jid = dispatch.job_id(run.pk, 0)
    executors.RQ.submit(str(run.pk), job_id=jid)
    queue.connection.lrem(queue.key, 0, jid)
    job = Job.fetch(jid, connection=queue.connection)
    with queue.connection.pipeline() as pipeline:
        execution = Execution.create(job, ttl=600, pipeline=pipeline, worker_name="gone")
        job.set_status(JobStatus.STARTED, pipeline=pipeline)
        pipeline.hset(job.key, "worker_name", "gone")
        StartedJobRegistry(queue=queue).add_execution(execution, pipeline=pipeline, ttl=600)
        pipeline.execute()
    queue.connection.delete(execution.key)
    with pytest.raises(ValueError, match="not found in Redis"):  # what RQ itself does with it
        Job.fetch(jid, connection=queue.connection).delete()
    return jid


def test_a_job_rq_cannot_delete_is_cleared_and_every_run_behind_it_recovered_in_one_pass(rq):
    head = stale(30)
    jid = half_gone_job(rq, head)
    behind = [stale(20 - i) for i in range(3)]

    report = recovery.sweep_queued(older_than=60)

    assert report.error == "" and report.skipped == []
    assert set(report.recovered) == {head.pk, *(run.pk for run in behind)}
    assert rq.connection.lpos(rq.key, jid) is not None  # dispatched again from a clean job
    keys = {key.decode() for key in rq.connection.keys(f"*{jid}*")}
    assert not any(key.startswith("rq:execution") for key in keys), keys
    assert all(AgentRun.objects.get(pk=run.pk).status == RunStatus.QUEUED for run in [head, *behind])


def test_one_runs_own_error_is_skipped_and_logged_not_taken_for_an_outage(rq, monkeypatch, caplog):
    runs = [stale(30), stale(20), stale(10)]
    real = rq_queue.RqExecutor.holds

    def holds(self, run_id, **kwargs):
        if run_id == str(runs[0].pk):
            raise RuntimeError("this one job is unreadable")
        return real(self, run_id, **kwargs)

    monkeypatch.setattr(rq_queue.RqExecutor, "holds", holds)
    report = recovery.sweep_queued(older_than=60)
    assert report.skipped == [runs[0].pk]
    assert report.recovered == [runs[1].pk, runs[2].pk]
    assert report.error == ""
    assert "skipped run" in caplog.text and "this one job is unreadable" in caplog.text


def test_agent_reap_exits_0_when_redis_is_up_behind_a_half_gone_job(rq):
    head = stale(30)
    half_gone_job(rq, head)
    behind = stale(10)
    out = io.StringIO()
    call_command("agent_reap", stdout=out)
    assert "queued runs: 2 recovered (no job)" in out.getvalue()
    assert {head.pk, behind.pk} <= set(AgentRun.objects.filter(status=RunStatus.QUEUED).values_list("pk", flat=True))


def test_a_job_whose_hash_went_between_the_look_and_the_delete_is_cleared(rq):
    """The kill matrix found it: a dead agent_worker's job cleaned from its registries while the
    sweep held its id. ``Job.delete`` then raises ``InvalidJobOperation`` (no status to read);
    the job's keys are removed by name, and the run is dispatched again, not skipped pass after pass."""
    from rq.exceptions import InvalidJobOperation
    from rq.job import Job
    from rq.registry import ScheduledJobRegistry

    run = stale(30)
    jid = dispatch.job_id(run.pk, 0)
    rq.connection.zadd(ScheduledJobRegistry(queue=rq).key, {jid: 1})  # listed, its hash gone
    with pytest.raises(InvalidJobOperation):  # what RQ itself does with it
        Job(jid, connection=rq.connection).delete()
    rq_queue.clear_job(rq, jid)
    assert rq.connection.zscore(ScheduledJobRegistry(queue=rq).key, jid) is None
    report = recovery.sweep_queued(older_than=60)
    assert (report.recovered, report.skipped) == ([run.pk], [])
    assert rq.connection.lpos(rq.key, jid) is not None
