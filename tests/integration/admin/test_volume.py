"""The runs admin at a million runs (issue 45): the list, its search and each of its filters
answer within a generous bound however much history the table holds.

The million runs are written by SQL (``testing.volume``; no steps: the list counts them per
row shown, through an index) inside the test's transaction, with the run table's indexes built
after the rows rather than row by row; ``ANALYZE`` gives the planner their statistics as autovacuum would; the
rollback at the end takes them away again. The figures belong to ``bench/volume.py``: this only
asserts the bound (before issue 45 the list took 5-10 s here).
"""

from __future__ import annotations

import time

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from nrllm_agents.models import AgentRun
from nrllm_agents.testing import volume

pytestmark = [pytest.mark.postgres_only, pytest.mark.slow]

RUNS = 1_000_000
BOUND = 1.0  # seconds: generous (a quiet machine answers each in tens of milliseconds)
CHANGELIST = reverse("admin:nrllm_agents_agentrun_changelist")


def test_the_admin_list_its_search_and_filters_answer_quickly_at_a_million_runs(client, django_user_model):
    users = [django_user_model.objects.create_user(f"user{i}").pk for i in range(10)]
    operator = django_user_model.objects.create_superuser("op", "op@example.com", "pw")
    client.force_login(operator)
    with volume.indexes_set_aside(AgentRun._meta.db_table):
        volume.fill(1, RUNS, top=RUNS, steps=0, users=users, base=timezone.now())
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE nrllm_agents_agentrun")
    newest = AgentRun.objects.order_by("-created_at").values_list("pk", flat=True).first()

    slow = {}
    for params in (
        {},
        {"q": "order #42"},
        {"q": str(newest)[:6]},
        {"q": str(newest)},
        {"status__exact": "cancelled"},
        {"status__exact": "running"},
        {"provider": "anthropic"},
        {"termination_reason__exact": "completed"},
        {"cancel_source__exact": "cli"},
        {"created_at__gte": timezone.now().replace(hour=0).isoformat()},
        {"parent__isempty": "0"},
        {"thread__isempty": "1"},
        {"health": "lease_expired"},
        {"status__exact": "completed", "provider": "openai", "q": "order #99"},
        {"p": "50"},
    ):
        # The best of up to five answers: a CI runner's other slots can stall a request for a
        # second or two; a list that scans the table is slow every time (5-10 s before issue 45).
        elapsed = float("inf")
        for _ in range(5):
            started = time.perf_counter()
            response = client.get(CHANGELIST, params)
            elapsed = min(elapsed, time.perf_counter() - started)
            assert response.status_code == 200, params
            if elapsed < BOUND:
                break
        if elapsed >= BOUND:
            slow[str(params)] = round(elapsed, 2)
        shown = response.context["cl"].result_list
        if params.get("q") == "order #42":
            assert shown and all("order #42" in run.prompt for run in shown)
        if params.get("q") == str(newest)[:6]:
            assert newest in {run.pk for run in shown}
    assert not slow, f"slower than {BOUND} s at {RUNS:,} runs: {slow}"
