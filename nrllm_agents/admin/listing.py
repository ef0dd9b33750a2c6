"""What keeps the runs list as fast at millions of runs as at a thousand (issue 45).

Each piece replaces a query over the whole table that the admin makes by default:

- ``RunPaginator`` counts at most ``COUNT_CAP`` rows of the listed runs (a ``LIMIT`` inside the
  count); past that the list says "more than" and, unfiltered on PostgreSQL, shows the planner's
  estimate (``pg_class.reltuples``) rather than a ``COUNT(*)`` of every run;
- ``ProviderFilter`` takes its choices from the providers the settings and the connections
  name, not from a ``SELECT DISTINCT provider`` over the runs;
- ``search`` matches a phrase of a prompt (``icontains``: a trigram index serves it on
  PostgreSQL) or the start of a run id (a range of the primary key), never ``LIKE`` over ids.
"""

from __future__ import annotations

import re
import uuid
from functools import cached_property
from typing import Any

from django.contrib import admin
from django.core.paginator import Paginator
from django.db import connection
from django.db.models import F, OrderBy, Q, QuerySet
from django.db.models.functions import Coalesce
from django.http import HttpRequest

from ..catalog.registry import CONNECTION_CLASSES, provider_names
from ..models import AgentRun, Connection

COUNT_CAP = 10_000  # rows a page's count reads at most
SORT_CAP = 50_000  # a search's matches sorted at most, rather than met along the created_at index
_HEX_PREFIX = re.compile(r"[0-9a-f]{1,32}")


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


# The newest first, through an expression no index serves: for a search with few matches, the
# planner then sorts them (read from the trigram index) instead of walking the created_at index
# in the hope of meeting them early, which reads half the table when they are old ones.
SORTED_MATCHES = (Coalesce("created_at", "created_at").desc(), OrderBy(F("pk"), descending=True))
NEWEST_FIRST = ("-created_at", "-pk")


def search(queryset: QuerySet[AgentRun], term: str) -> QuerySet[AgentRun]:
    """Runs whose prompt holds ``term`` as written (case aside), as the playground's search, or
    whose id starts with ``term`` (hex digits, dashes optional); newest first as the list is,
    sorted after the search when it matches few runs (``SORTED_MATCHES``).

    The phrase whole rather than each word apart: its inner spaces give the trigram index
    word-edge trigrams, so ``order #42`` narrows to the prompts with a word starting ``42``,
    where the words apart would be ``order`` (every order) and ``#42`` (too short to index).
    """
    term = term.strip()
    matches = Q(prompt__icontains=term)
    span = id_prefix_range(term)
    if span is not None:
        matches |= Q(pk__range=span)
    found = queryset.filter(matches)
    if tuple(found.query.order_by) == NEWEST_FIRST and few(found):
        return found.order_by(*SORTED_MATCHES)
    return found


def few(queryset: QuerySet[AgentRun]) -> bool:
    """Whether ``queryset`` matches at most ``SORT_CAP`` runs (read without an order: a search
    reads them from its trigram index)."""
    return int(queryset.order_by().values("pk")[: SORT_CAP + 1].count()) <= SORT_CAP


def id_prefix_range(term: str) -> tuple[uuid.UUID, uuid.UUID] | None:
    """The lowest and highest run id that start with ``term``, or ``None`` when it is not hex."""
    digits = term.strip().lower().replace("-", "")
    if not _HEX_PREFIX.fullmatch(digits):
        return None
    return uuid.UUID(digits.ljust(32, "0")), uuid.UUID(digits.ljust(32, "f"))
