"""The django-rq dashboard, behind a stronger gate than the admin's.

django-rq lets any staff user empty queues, delete and requeue jobs. Emptying a queue
strands the runs whose jobs vanish, so the dashboard's pages are for the users
``policy.may_manage_queues`` names (superusers); other staff get 403, anonymous callers
the admin's login page. The token-authenticated statistics endpoints (read only) keep
django-rq's own gate.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, reverse
from django_rq.urls import get_admin_urlpatterns, get_api_urlpatterns

from ..access import policy

NO_QUEUES = (
    "No RQ queues are configured (RQ_QUEUES is not set): runs execute in the web process. "
    "To run them on RQ workers, set REDIS_URL and RQ_QUEUES (docs: operations/workers).\n"
)


def queue_managers_only(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Let the view answer only users the policy allows to manage queues."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not policy.authenticated(request.user):
            return redirect_to_login(request.get_full_path(), reverse("admin:login"))
        if not policy.may_manage_queues(request.user):
            raise PermissionDenied("The queue dashboard is for superusers.")
        if not getattr(settings, "RQ_QUEUES", None):
            # django-rq has nothing to show (and raises) without queues: runs execute in-process
            return HttpResponse(NO_QUEUES, content_type="text/plain; charset=utf-8")
        return view(request, *args, **kwargs)

    return wrapper


def urlpatterns() -> list[URLPattern]:
    """django-rq's URLs with every dashboard page gated; include under the ``django_rq`` namespace."""
    return get_api_urlpatterns() + get_admin_urlpatterns(view_wrapper=queue_managers_only)
