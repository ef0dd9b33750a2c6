"""The Content-Security-Policy header on Django 5.2, which has no ``ContentSecurityPolicyMiddleware``.

On Django 6.0 and later the settings name Django's own middleware; on 5.2 they name this one,
which sends the same ``SECURE_CSP`` policy (a dict of directive to sources, as Django 6 reads
it; no nonce: no page of the app has an inline script) and leaves a header a view set alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse

HEADER = "Content-Security-Policy"
REPORT_ONLY_HEADER = "Content-Security-Policy-Report-Only"


def build_policy(config: Mapping[str, Any]) -> str:
    """``default-src 'self'; script-src 'self'``: each directive with its sources, in order;
    a directive whose value is ``True`` alone (``upgrade-insecure-requests``), one without
    sources left out."""
    parts = []
    for directive, sources in config.items():
        if sources is True:
            parts.append(directive)
        elif sources:
            values = [sources] if isinstance(sources, str) else list(_flat(sources))
            parts.append(" ".join([directive, *values]))
    return "; ".join(parts)


def _flat(sources: Iterable[Any]) -> Iterable[str]:
    return (str(source) for source in sources)


class ContentSecurityPolicyMiddleware:
    """Adds ``SECURE_CSP`` (enforced) and ``SECURE_CSP_REPORT_ONLY`` to every response."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        for header, name in ((HEADER, "SECURE_CSP"), (REPORT_ONLY_HEADER, "SECURE_CSP_REPORT_ONLY")):
            config = getattr(settings, name, None)
            if config and header not in response:
                response[header] = build_policy(config)
        return response
