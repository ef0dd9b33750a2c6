"""Rate limits for the API's write operations (create, cancel)."""

from __future__ import annotations

from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle


class RunRateThrottle(SimpleRateThrottle):
    """Per-user (per-IP for anonymous callers) rate limit named by a scope.

    The rate comes from ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"][scope]``, read on each request
    rather than at import (DRF's scoped throttle freezes the rates when first imported), so a
    changed setting takes effect without a restart of the module.
    """

    def __init__(self, scope: str) -> None:
        self.scope = scope
        super().__init__()

    def get_rate(self) -> str | None:
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)

    def get_cache_key(self, request, view) -> str:
        ident = request.user.pk if request.user and request.user.is_authenticated else self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}


CREATE_SCOPE = "run_create"
CANCEL_SCOPE = "run_cancel"
