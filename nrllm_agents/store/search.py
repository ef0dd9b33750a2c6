"""Searching runs by a phrase of their prompt or the start of their id, through an index (issue 45).

The admin's runs list and the playground's list of a user's runs share it: on PostgreSQL a
trigram index on ``UPPER(prompt)`` (migration 0028) serves ``icontains``, and an id prefix is a
range of the primary key, so neither reads every prompt or every id.
"""

from __future__ import annotations

import re
import uuid

from django.db.models import F, OrderBy, Q, QuerySet
from django.db.models.functions import Coalesce

from ..models import AgentRun

SORT_CAP = 50_000  # a search's matches sorted at most, rather than met along the created_at index
_HEX_PREFIX = re.compile(r"[0-9a-f]{1,32}")


# The newest first, through an expression no index serves: for a search with few matches, the
# planner then sorts them (read from the trigram index) instead of walking the created_at index
# in the hope of meeting them early, which reads half the table when they are old ones.
SORTED_MATCHES = (Coalesce("created_at", "created_at").desc(), OrderBy(F("pk"), descending=True))
NEWEST_FIRST = ("-created_at", "-pk")


def search(queryset: QuerySet[AgentRun], term: str, *, sort_cap: int = SORT_CAP) -> QuerySet[AgentRun]:
    """Runs whose prompt holds ``term`` as written (case aside), as the playground's search, or
    whose id starts with ``term`` (hex digits, dashes optional); newest first as the list is,
    sorted after the search when it matches at most ``sort_cap`` runs (``SORTED_MATCHES``).

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
    if tuple(found.query.order_by) == NEWEST_FIRST and few(found, sort_cap):
        return found.order_by(*SORTED_MATCHES)
    return found


def few(queryset: QuerySet[AgentRun], cap: int = SORT_CAP) -> bool:
    """Whether ``queryset`` matches at most ``cap`` runs (read without an order: a search reads
    them from its trigram index)."""
    return int(queryset.order_by().values("pk")[: cap + 1].count()) <= cap


def id_prefix_range(term: str) -> tuple[uuid.UUID, uuid.UUID] | None:
    """The lowest and highest run id that start with ``term``, or ``None`` when it is not hex."""
    digits = term.strip().lower().replace("-", "")
    if not _HEX_PREFIX.fullmatch(digits):
        return None
    return uuid.UUID(digits.ljust(32, "0")), uuid.UUID(digits.ljust(32, "f"))
