"""The one rate limiter: per user (per address for anonymous callers), per action, atomic.

A sliding window over two fixed windows (the previous one weighted by how much of it still
overlaps, rounded up: never more than the rate across a window's turn), checked and counted in
one atomic step, so parallel requests cannot all read "room left" and all pass (DRF's throttles
read, then write: 60 parallel creates against 20/min passed 60). A refused attempt is not
counted. The counts live in Redis (one Lua script; a Redis outage falls back to the database for
``REDIS_RETRY_SECONDS``) or in the database (one ``INSERT … ON CONFLICT DO UPDATE … WHERE count
< allowed RETURNING count`` on ``RateCounter``), as ``RATE_LIMIT_STORE`` says. The rates are
``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]``, written as DRF writes them. Settings and tests:
docs/operations/security.md ("Rate limits and caps").
"""

from __future__ import annotations

import enum
import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection

from ..conf import app_settings
from ..models import RateCounter

logger = logging.getLogger(__name__)

_PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
KEY_PREFIX = "nrllm:rate:"


class Action(enum.StrEnum):
    """What an attempt spends; the value is its rate's name in ``DEFAULT_THROTTLE_RATES``."""

    CREATE = "run_create"  # starting a run, however: create, fork, the playground
    CANCEL = "run_cancel"  # a single or a bulk cancel
    LIST_TOOLS = "tool_list"  # GET /api/tools/: a read of the MCP catalog


@dataclass(frozen=True)
class RateRefused:
    """The attempt was refused; ``wait`` is the whole seconds until one would pass."""

    wait: int

    @property
    def detail(self) -> str:
        return f"Too many requests; try again in {self.wait} s."


def parse_rate(rate: str | None) -> tuple[int, int] | None:
    """``"120/min"`` as ``(120, 60)``, ``"10/15min"`` as ``(10, 900)``; ``None`` for no limit.
    Raises ``ValueError`` on bad text."""
    if rate is None:
        return None
    count, _, period = str(rate).partition("/")
    period = period.strip()
    digits = len(period) - len(period.lstrip("0123456789"))
    times = int(period[:digits]) if digits else 1
    number, unit = int(count), _PERIODS[period[digits : digits + 1]]
    if number < 0 or times < 1:
        raise ValueError(rate)
    return number, unit * times


def rate_for(action: Action) -> tuple[int, int] | None:
    """``(allowed, per seconds)`` for ``action`` now, or ``None`` when it is not limited."""
    from rest_framework.settings import api_settings

    rate = api_settings.DEFAULT_THROTTLE_RATES.get(action.value)
    # (the stubs type the rates as numbers; DRF's own are text such as "120/min")
    return parse_rate(None if rate is None else str(rate))


def identity(request: Any) -> str:
    """Whom an attempt is counted against: the user, else the client's address."""
    user = getattr(request, "user", None)
    if user is not None and getattr(user, "is_authenticated", False):
        return f"user:{user.pk}"
    return f"addr:{request.META.get('REMOTE_ADDR', '')}"


def take(request: Any, action: Action) -> RateRefused | None:
    """Spend one attempt of ``action`` for the caller of ``request``: ``None`` when it may go on,
    else ``RateRefused`` (nothing was counted)."""
    return _spend(identity(request), action)


def take_for(user_id: Any, action: Action) -> RateRefused | None:
    """``take`` for the user of id ``user_id`` where no request is at hand (a sub-agent's run,
    started by its parent's worker on its owner's behalf): the same count as their requests'."""
    return _spend(f"user:{user_id}", action)


def _spend(ident: str, action: Action) -> RateRefused | None:
    rate = rate_for(action)
    if rate is None:
        return None
    return attempt(f"{action.value}/{rate[1]}", ident, *rate)


def attempt(scope: str, ident: str, allowed: int, period: int, now: float | None = None) -> RateRefused | None:
    """One atomic check-and-count of ``ident`` under ``allowed`` per ``period`` seconds."""
    now = time.time() if now is None else now
    window = int(now // period)
    into = (now - window * period) / period  # how far into the current window, 0..1
    if _store() == "redis" and time.monotonic() >= _redis_down_until[0]:
        try:
            passed, current, previous = _redis_attempt(scope, ident, window, allowed, 1.0 - into, period)
        except _redis_errors() as exc:
            _redis_down_until[0] = time.monotonic() + REDIS_RETRY_SECONDS  # no connect timeout per request
            _warn_once(exc)
        else:
            return None if passed else _refusal(allowed, period, into, current, previous)
    passed, current, previous = _database_attempt(scope, ident, window, allowed, 1.0 - into)
    return None if passed else _refusal(allowed, period, into, current, previous)


def check(scope: str, ident: str, allowed: int, period: int, now: float | None = None) -> RateRefused | None:
    """Whether one more ``attempt`` of ``ident`` would pass now, counting nothing (a read; a
    count in flight may pass it)."""
    now = time.time() if now is None else now
    window = int(now // period)
    into = (now - window * period) / period
    counts: tuple[int, int] | None = None
    if _store() == "redis" and time.monotonic() >= _redis_down_until[0]:
        try:
            counts = _redis_counts(scope, ident, window)
        except _redis_errors() as exc:
            _redis_down_until[0] = time.monotonic() + REDIS_RETRY_SECONDS
            _warn_once(exc)
    current, previous = counts if counts is not None else _database_counts(scope, ident, window)
    if current + math.ceil(previous * (1.0 - into)) < allowed:
        return None
    return _refusal(allowed, period, into, current, previous)


def _refusal(allowed: int, period: int, into: float, current: int, previous: int) -> RateRefused:
    """How long until the weighted count leaves room for one more."""
    left = period * (1.0 - into)
    if previous > 0 and current < allowed:
        # ceil(previous * (1 - into - t/period)) + current < allowed
        left = max(0.0, left - period * (allowed - 1 - current) / previous)
    return RateRefused(wait=max(1, math.ceil(left)))


def _store() -> str:
    choice = str(app_settings.RATE_LIMIT_STORE)
    if choice == "database" or not getattr(settings, "REDIS_URL", None):
        return "database"  # "redis" without REDIS_URL is refused by the checks (E013)
    return "redis"


# --- the database ---------------------------------------------------------------------------

_UPSERT = (
    "INSERT INTO {t} (scope, ident, period, count) VALUES (%s, %s, %s, 1) "
    "ON CONFLICT (scope, ident, period) DO UPDATE SET count = {t}.count + 1 WHERE {t}.count < %s "
    "RETURNING count"
)


def _database_counts(scope: str, ident: str, window: int) -> tuple[int, int]:
    """The counts of the current and the previous window."""
    counts = dict(
        RateCounter.objects.filter(scope=scope, ident=ident, period__in=(window - 1, window)).values_list(
            "period", "count"
        )
    )
    return counts.get(window, 0), counts.get(window - 1, 0)


def _database_attempt(scope: str, ident: str, window: int, allowed: int, weight: float) -> tuple[bool, int, int]:
    table = connection.ops.quote_name(RateCounter._meta.db_table)
    current, previous = _database_counts(scope, ident, window)
    room = allowed - math.ceil(previous * weight)  # what the current window may hold
    if room <= 0:
        return False, current, previous
    with connection.cursor() as cursor:
        cursor.execute(_UPSERT.format(t=table), [scope, ident, window, room])
        row = cursor.fetchone()
    if row is None:  # the row is full: the guarded update matched nothing
        return False, max(current, room), previous
    if row[0] == 1:  # the first attempt of a window: prune this scope's finished windows
        RateCounter.objects.filter(scope=scope, period__lt=window - 1).delete()
    return True, row[0], previous


# --- Redis ----------------------------------------------------------------------------------

# KEYS: current window, previous window; ARGV: allowed, weight of the previous, ttl (seconds)
_LUA = """
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local previous = tonumber(redis.call('GET', KEYS[2]) or '0')
if current + math.ceil(previous * tonumber(ARGV[2])) >= tonumber(ARGV[1]) then
  return {0, current, previous}
end
current = redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]))
return {1, current, previous}
"""

REDIS_RETRY_SECONDS = 5.0  # after a failure, count in the database this long before asking Redis again
_redis_down_until = [0.0]
_clients: dict[str, tuple[Any, Any]] = {}
_clients_lock = threading.Lock()
_warned = threading.Event()


def _redis_errors() -> tuple[type[BaseException], ...]:
    import redis

    return (redis.RedisError, OSError)


def _client() -> tuple[Any, Any]:
    """This process's Redis client for ``REDIS_URL`` and the registered script."""
    import redis

    url = settings.REDIS_URL
    if not url:  # the callers ask only with REDIS_URL set (_store, reset)
        raise RuntimeError("REDIS_URL is not set: the rate counts have no Redis to live in")
    with _clients_lock:
        if url not in _clients:
            client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
            _clients[url] = (client, client.register_script(_LUA))
        return _clients[url]


def _redis_attempt(
    scope: str, ident: str, window: int, allowed: int, weight: float, period: int
) -> tuple[bool, int, int]:
    _, script = _client()
    base = f"{KEY_PREFIX}{scope}:{ident}:"
    passed, current, previous = script(
        keys=[f"{base}{window}", f"{base}{window - 1}"], args=[allowed, repr(weight), 2 * period]
    )
    _warned.clear()
    return bool(passed), int(current), int(previous)


def _redis_counts(scope: str, ident: str, window: int) -> tuple[int, int]:
    client, _ = _client()
    base = f"{KEY_PREFIX}{scope}:{ident}:"
    current, previous = client.mget([f"{base}{window}", f"{base}{window - 1}"])
    return int(current or 0), int(previous or 0)


def _warn_once(exc: BaseException) -> None:
    if not _warned.is_set():
        _warned.set()
        logger.warning("rate limits: Redis is unreachable (%s); counting in the database meanwhile", type(exc).__name__)


def reset() -> None:
    """Forget every count (tests: user ids repeat from one test to the next)."""
    _redis_down_until[0] = 0.0
    RateCounter.objects.all().delete()
    if getattr(settings, "REDIS_URL", None):
        try:
            client, _ = _client()
            keys = list(client.scan_iter(match=f"{KEY_PREFIX}*", count=1000))
            if keys:
                client.delete(*keys)
        except _redis_errors():
            pass
