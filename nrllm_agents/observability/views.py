"""``GET /metrics``: the Prometheus text format, for staff, a bearer token, or (opt-in) localhost.

Safe by default: without configuration only a signed-in staff user may read it. Set
``NRLLM_METRICS_TOKEN`` and give Prometheus ``authorization: {credentials: <token>}``; or
set ``NRLLM_METRICS_ALLOW_LOCALHOST=1`` when the scraper runs on the same host and no reverse
proxy on this host forwards outside requests (behind one, every request comes from localhost).
"""

from __future__ import annotations

import hmac
import ipaddress

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from ..access import policy
from ..conf import app_settings
from . import metrics
from .collectors import RunStateCollector


def exposition() -> bytes:
    """Every metric of this process, or of all processes sharing ``PROMETHEUS_MULTIPROC_DIR``,
    followed by the run-state gauges read from the database."""
    if metrics.MULTIPROC_DIR:
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=metrics.MULTIPROC_DIR)  # type: ignore[no-untyped-call]  # unannotated
    else:
        registry = REGISTRY
    state = CollectorRegistry(auto_describe=False)
    state.register(RunStateCollector())
    return generate_latest(registry) + generate_latest(state)


def _bearer_ok(request: HttpRequest) -> bool:
    token = str(app_settings.METRICS_TOKEN or "")
    header = request.headers.get("Authorization", "")
    if not token or not header.startswith("Bearer "):
        return False
    return hmac.compare_digest(header[len("Bearer ") :].strip().encode(), token.encode())


def _from_loopback(request: HttpRequest) -> bool:
    try:
        return ipaddress.ip_address(request.META.get("REMOTE_ADDR", "")).is_loopback
    except ValueError:
        return False


def allowed(request: HttpRequest) -> bool:
    """Whether ``request`` may read the metrics (see the module docstring)."""
    if policy.may_read_metrics(getattr(request, "user", None)):
        return True
    if _bearer_ok(request):
        return True
    return bool(app_settings.METRICS_ALLOW_LOCALHOST) and _from_loopback(request)


@never_cache
@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    if not allowed(request):
        return HttpResponse(
            "403 forbidden: sign in as staff, send the bearer token (NRLLM_METRICS_TOKEN), "
            "or allow localhost (NRLLM_METRICS_ALLOW_LOCALHOST=1)\n",
            status=403,
            content_type="text/plain; charset=utf-8",
        )
    return HttpResponse(exposition(), content_type=CONTENT_TYPE_LATEST)
