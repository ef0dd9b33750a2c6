"""What keeps the runs list as fast at millions of runs as at a thousand (issue 45).

Each piece replaces a query over the whole table that the admin makes by default:

- ``RunPaginator`` counts at most ``COUNT_CAP`` rows of the listed runs (a ``LIMIT`` inside the
  count); past that the list says "more than" and, unfiltered on PostgreSQL, shows the planner's
  estimate (``pg_class.reltuples``) rather than a ``COUNT(*)`` of every run;
- ``ProviderFilter`` takes its choices from the providers the settings and the connections
  name, not from a ``SELECT DISTINCT provider`` over the runs;
- ``search`` (``store.search``, which the playground's search shares) matches a phrase of a
  prompt (``icontains``: a trigram index serves it on PostgreSQL) or the start of a run id (a
  range of the primary key), never ``LIKE`` over ids.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from django.contrib import admin
from django.core.paginator import Paginator
from django.db import connection
from django.db.models import QuerySet
from django.http import HttpRequest

from ..catalog.registry import CONNECTION_CLASSES, provider_names
from ..models import AgentRun, Connection
from ..store.search import search

__all__ = ["ProviderFilter", "RunPaginator", "search", "table_estimate"]

COUNT_CAP = 10_000  # rows a page's count reads at most


class RunPaginator(Paginator):  # type: ignore[type-arg]
    """A paginator whose count reads at most ``COUNT_CAP + 1`` rows.

    ``approximate`` is true when the count is a lower bound (``more than``) or an estimate
    (``about``); the page links then reach the first ``COUNT_CAP`` runs, and the filters narrow
    the rest.
    """

    approximate = False
    estimated = False
    cap = COUNT_CAP

    @cached_property
    def count(self) -> int:
        queryset: QuerySet[AgentRun] = self.object_list  # type: ignore[assignment]
        counted = int(queryset.order_by().values("pk")[: COUNT_CAP + 1].count())
        if counted <= COUNT_CAP:
            return counted
        self.approximate = True
        if not queryset.query.where:
            estimate = table_estimate(AgentRun._meta.db_table)
            if estimate > COUNT_CAP:
                self.estimated = True
                return estimate
        return counted


def table_estimate(table: str) -> int:
    """The planner's row estimate of ``table`` on PostgreSQL (kept by autovacuum's ``ANALYZE``);
    0 elsewhere or before the first ``ANALYZE``."""
    if connection.vendor != "postgresql":
        return 0
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass", [table])
        row = cursor.fetchone()
    return max(int(row[0]), 0) if row else 0


class ProviderFilter(admin.SimpleListFilter):
    """Runs of one provider; its choices: the providers of the settings and the connections' kinds."""

    title = "provider"
    parameter_name = "provider"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = set(provider_names()) | set(CONNECTION_CLASSES)
        names.update(Connection.objects.order_by().values_list("kind", flat=True).distinct())  # a small table
        if self.value():
            names.add(str(self.value()))  # a provider no longer configured stays filterable by its URL
        return [(name, name) for name in sorted(names)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[AgentRun]) -> QuerySet[AgentRun]:
        return queryset.filter(provider=self.value()) if self.value() else queryset
