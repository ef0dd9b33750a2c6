"""Rate limits for the API's write operations (create, fork, cancel) and its reads of the MCP
catalog (``GET /api/tools/``): DRF's hook over ``admission.rates``, the one limiter the
playground asks too."""

from __future__ import annotations

from typing import Any

from rest_framework.throttling import BaseThrottle

from .. import admission


class RunRateThrottle(BaseThrottle):
    """Spends one attempt of ``action`` per request (atomic across threads and processes);
    a refused request is a 429 with ``Retry-After``."""

    def __init__(self, action: admission.Action) -> None:
        self.action = action
        self.refused: admission.RateRefused | None = None

    def allow_request(self, request: Any, view: Any) -> bool:
        self.refused = admission.take(request, self.action)
        return self.refused is None

    def wait(self) -> float | None:
        return None if self.refused is None else float(self.refused.wait)


CREATE_SCOPE = admission.Action.CREATE
CANCEL_SCOPE = admission.Action.CANCEL
TOOLS_SCOPE = admission.Action.LIST_TOOLS
