"""``POST /api/runs/cancel/``: selections, visibility, dry runs, validation, and a constant statement count."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from nrllm_agents.models import AgentRun, AgentRunEvent, RunStatus

pytestmark = pytest.mark.django_db

BULK = "/api/runs/cancel/"


def statuses(*runs) -> list[str]:
    return [AgentRun.objects.get(pk=r.pk).status for r in runs]


def test_by_ids_cancels_only_the_callers_runs_and_counts_the_rest_as_not_found(alice, bob, api, make_run):
    queued, waiting, done = (
        make_run(alice, s) for s in (RunStatus.QUEUED, RunStatus.WAITING_FOR_APPROVAL, RunStatus.COMPLETED)
    )
    theirs = make_run(bob)
    ids = [str(r.pk) for r in (queued, waiting, done, theirs)] + [str(uuid.uuid4())]
    response = api.post(BULK, {"ids": ids, "reason": "cleanup"}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json() == {
        "dry_run": False,
        "matched": 3,
        "cancelled": {"queued": 1, "waiting_for_approval": 1},
        "unchanged": {"completed": 1},
        "cancelled_total": 2,
        "not_found": 2,
        "detail": "2 runs cancelled, 1 run already finished.",
    }
    assert statuses(queued, waiting, done, theirs) == ["cancelled", "cancelled", "completed", "queued"]
    for run in (queued, waiting):
        record = AgentRun.objects.get(pk=run.pk)
        assert (record.cancel_source, record.cancelled_by.username, record.cancel_reason) == ("api", "alice", "cleanup")
        assert record.stopped_at is not None
        assert AgentRunEvent.objects.filter(run_id=run.pk).order_by("sequence").last().kind == "cancelled"


def test_by_status_and_creation_time(alice, api, make_run):
    old, new = make_run(alice), make_run(alice)
    running = make_run(alice, RunStatus.RUNNING)
    AgentRun.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=2))
    cutoff = (timezone.now() - timedelta(days=1)).isoformat()
    response = api.post(BULK, {"status": ["queued"], "created_before": cutoff}, format="json")
    assert response.json()["cancelled"] == {"queued": 1}
    assert statuses(old, new, running) == ["cancelled", "queued", "running"]

    response = api.post(BULK, {"status": ["queued", "running"]}, format="json")
    assert response.json()["cancelled"] == {"queued": 1, "running": 1}
    assert response.json()["not_found"] is None
    # The executing run stops at its own next boundary: no stopped_at yet.
    assert AgentRun.objects.get(pk=running.pk).stopped_at is None


def test_staff_select_across_owners_only_with_the_cancel_permission(alice, bob, staff, client_for, make_run):
    # Guards issue 9 finding 3: is_staff alone once let one user stop every run in the system.
    from django.contrib.auth.models import Permission

    runs = [make_run(alice), make_run(bob), make_run(staff)]
    response = client_for(staff).post(BULK, {"status": ["queued"]}, format="json")
    assert response.json()["cancelled_total"] == 1  # only the staff user's own run
    assert statuses(*runs) == ["queued", "queued", "cancelled"]
    staff.user_permissions.add(Permission.objects.get(codename="cancel_agentrun"))
    staff = type(staff).objects.get(pk=staff.pk)  # a fresh permission cache
    response = client_for(staff).post(BULK, {"status": ["queued"]}, format="json")
    assert response.json()["cancelled_total"] == 2
    assert statuses(*runs) == ["cancelled", "cancelled", "cancelled"]


def test_a_dry_run_counts_and_changes_nothing(alice, api, make_run):
    runs = [make_run(alice), make_run(alice), make_run(alice, RunStatus.FAILED)]
    before = list(AgentRun.objects.order_by("pk").values())
    response = api.post(BULK, {"ids": [str(r.pk) for r in runs], "dry_run": True}, format="json")
    assert response.json() == {
        "dry_run": True,
        "matched": 3,
        "cancelled": {"queued": 2},
        "unchanged": {"failed": 1},
        "cancelled_total": 2,
        "not_found": 0,
        "detail": "2 runs will be cancelled, 1 run already finished.",
    }
    assert list(AgentRun.objects.order_by("pk").values()) == before
    assert not AgentRunEvent.objects.filter(kind="cancelled").exists()


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "non_field_errors"),
        ({"ids": [str(uuid.uuid4())], "status": ["queued"]}, "non_field_errors"),
        ({"ids": [str(uuid.uuid4())], "created_before": "2030-01-01T00:00:00Z"}, "created_before"),
        ({"ids": []}, "ids"),
        ({"ids": ["not-a-uuid"]}, "ids"),
        ({"ids": [str(uuid.uuid4())] * 1001}, "ids"),
        ({"status": ["asleep"]}, "status"),
        ({"status": "queued"}, "status"),
        ({"status": ["queued"], "created_before": "soon"}, "created_before"),
        ({"status": ["queued"], "dry_run": "maybe"}, "dry_run"),
    ],
)
def test_a_bad_selection_is_400_and_cancels_nothing(alice, api, make_run, body, field):
    run = make_run(alice)
    response = api.post(BULK, body, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert statuses(run) == ["queued"]


def _queued_runs(owner, n: int) -> None:
    """n queued rows for the owner, inserted in batches: test data, not a status transition."""
    AgentRun.objects.bulk_create(
        [
            AgentRun(
                owner=owner,
                status=RunStatus.QUEUED,
                prompt=f"task {i}",
                provider="scripted",
                request_payload={"prompt": f"task {i}"},
            )
            for i in range(n)
        ],
        batch_size=1000,
    )


def test_cancelling_10000_queued_runs_takes_as_many_statements_as_cancelling_10(alice, bob, api, make_run):
    bystander = make_run(bob)  # another owner's queued run: must be left alone

    def cancel_all() -> tuple[int, dict]:
        with CaptureQueriesContext(connection) as queries:
            response = api.post(BULK, {"status": ["queued"]}, format="json")
        assert response.status_code == 200
        # The rate limit counts in a database table without Redis (admission.rates).
        return len([q for q in queries if "ratecounter" not in q["sql"]]), response.json()

    _queued_runs(alice, 10)
    small, small_body = cancel_all()
    _queued_runs(alice, 10_000)
    large, large_body = cancel_all()

    assert (small_body["cancelled"], large_body["cancelled"]) == ({"queued": 10}, {"queued": 10_000})
    # Auth, a savepoint, the threads among them (whose next messages may go once they stop), one
    # grouped count (and one by provider, for the metrics), the locks of the runs' trees, the
    # locks and the clock, one UPDATE per active status (four), one INSERT ... SELECT, the look-up
    # of cancelled runs whose sub-agents' runs are active (store.trees): the same for 10 as for 10,000.
    assert small == large <= 14, (small, large)
    assert AgentRun.objects.filter(owner=alice, status=RunStatus.CANCELLED, stopped_at__isnull=False).count() == 10_010
    assert AgentRunEvent.objects.filter(kind="cancelled").count() == 10_010
    assert statuses(bystander) == ["queued"]
