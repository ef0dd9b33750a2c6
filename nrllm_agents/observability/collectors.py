"""Gauges read at scrape time: active runs by status, expired leases, and the queue depth.

Counting at transitions would drift (bulk cancels, the reaper, a crashed process, several
processes in multiprocess mode), so the gauges ask the database, cheaply: one
``GROUP BY status`` restricted to the *active* statuses (served by the ``(status, created_at)``
index, so it touches the active rows only, never the history of finished runs) and one
count over the ``(status, lease_expires)`` index. The answer is cached for
``METRICS_STATE_TTL`` seconds so several scrapers cost one query. A database or Redis that
cannot be reached leaves its gauges out of the scrape instead of failing it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any, TypedDict

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

logger = logging.getLogger(__name__)


class _Cached(TypedDict):
    at: float  # time.monotonic() of the last read
    data: dict[str, Any] | None  # run_state() as read then; None: read afresh


_cache: _Cached = {"at": 0.0, "data": None}
_lock = threading.Lock()


def run_state() -> dict[str, Any]:
    """``{"status": {status: n for every active status}, "lease_expired": n, "queue": {...} | None}``."""
    from django.db.models import Count
    from django.utils import timezone

    from ..models import ACTIVE, AgentRun, RunStatus

    counts = {s.value: 0 for s in ACTIVE}
    counts.update(
        AgentRun.objects.filter(status__in=[s.value for s in ACTIVE])
        .order_by()
        .values_list("status")
        .annotate(n=Count("pk"))
    )
    expired = AgentRun.objects.filter(status=RunStatus.RUNNING, lease_expires__lt=timezone.now()).count()
    try:
        queue = queue_depth()
    except Exception as exc:  # Redis down: the database gauges still answer
        logger.warning("metrics: reading the queue depth failed (%s)", type(exc).__name__)
        queue = None
    return {"status": counts, "lease_expired": expired, "queue": queue, "budgets": budget_use()}


MAX_BUDGET_SERIES = 100  # budgets shown (the first by id): the labels stay bounded whatever is configured


def budget_use() -> list[tuple[list[str], dict[str, float | None]]]:
    """Each budget's labels (``budget`` id, ``scope``, ``window``: no names) and its spent,
    reserved and left cost and tokens (``None`` where it has no such ceiling)."""
    from ..models import Budget
    from ..store.budgets import use

    rows = []
    for budget in Budget.objects.order_by("pk")[:MAX_BUDGET_SERIES]:
        u = use(budget)
        values: dict[str, float | None] = {
            "spent_cost": float(u.spent_cost),
            "spent_tokens": float(u.spent_tokens),
            "reserved_cost": float(u.reserved_cost),
            "reserved_tokens": float(u.reserved_tokens),
            "left_cost": None if u.left_cost is None else float(u.left_cost),
            "left_tokens": None if u.left_tokens is None else float(u.left_tokens),
        }
        rows.append(([str(budget.pk), budget.scope, budget.window], values))
    return rows


def queue_depth() -> dict[str, int] | None:
    """Jobs waiting, scheduled (retries) and started in the RQ queue; ``None`` without Redis."""
    from ..conf import app_settings
    from ..executors import dispatch

    if not dispatch.uses_rq():
        return None
    import django_rq

    queue = django_rq.get_queue(app_settings.QUEUE_NAME)
    return {
        "waiting": queue.count,
        "scheduled": queue.scheduled_job_registry.count,
        "started": queue.started_job_registry.count,
    }


def cached_run_state() -> dict[str, Any]:
    from ..conf import app_settings

    with _lock:
        cached = _cache["data"]
        if cached is not None and time.monotonic() - _cache["at"] < app_settings.METRICS_STATE_TTL:
            return cached
    data = run_state()
    with _lock:
        _cache["at"], _cache["data"] = time.monotonic(), data
    return data


class RunStateCollector(Collector):
    """Yields ``nrllm_runs_active{status}``, ``nrllm_runs_lease_expired`` and ``nrllm_queue_jobs{state}``."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            data = cached_run_state()
        except Exception as exc:  # a scrape never fails because the database hiccups
            logger.warning("metrics: reading the run state failed (%s)", type(exc).__name__)
            return
        active = GaugeMetricFamily(
            "nrllm_runs_active", "Runs queued, running or waiting for approval.", labels=["status"]
        )
        for status, n in sorted(data["status"].items()):
            active.add_metric([status], n)
        yield active
        yield GaugeMetricFamily(
            "nrllm_runs_lease_expired", "Running runs whose lease expired (reaper work).", value=data["lease_expired"]
        )
        if data["queue"] is not None:
            jobs = GaugeMetricFamily("nrllm_queue_jobs", "Jobs in the RQ queue by state.", labels=["state"])
            for state, n in sorted(data["queue"].items()):
                jobs.add_metric([state], n)
            yield jobs
        yield from _budget_gauges(data.get("budgets") or [])


def _budget_gauges(rows: list[tuple[list[str], dict[str, float | None]]]) -> Iterator[GaugeMetricFamily]:
    """``nrllm_budget_{spent,reserved,left}{budget,scope,window,unit}``: unit ``cost`` (in the
    currency of the prices) or ``tokens``; ``left`` only for a ceiling the budget has."""
    labels = ["budget", "scope", "window", "unit"]
    families = {
        "spent": GaugeMetricFamily("nrllm_budget_spent", "Spent in the budget's current window.", labels=labels),
        "reserved": GaugeMetricFamily(
            "nrllm_budget_reserved", "Held by the model calls in flight (their worst case).", labels=labels
        ),
        "left": GaugeMetricFamily("nrllm_budget_left", "Left under the budget's ceiling now.", labels=labels),
    }
    for names, values in rows:
        for what, family in families.items():
            for unit in ("cost", "tokens"):
                value = values.get(f"{what}_{unit}")
                if value is not None:
                    family.add_metric([*names, unit], value)
    yield from families.values()
