"""Who may see and act on which run, for the playground pages and the browser stream.

A user sees and acts on their own runs; staff on every run. A run the caller may not see
answers 404, exactly like one that does not exist.
"""

from __future__ import annotations

import functools
import uuid
from typing import Any, Callable

from django.contrib.auth.views import redirect_to_login
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse_lazy

from ..models import AgentRun

LOGIN_URL = reverse_lazy("nrllm_web:login")


def wants_json(request: HttpRequest) -> bool:
    """The caller is a script (``fetch`` with ``Accept: application/json``), not a form post."""
    return "application/json" in request.headers.get("Accept", "")


def visible_runs(user: Any) -> QuerySet[AgentRun]:
    """The runs ``user`` may see: all for staff, their own otherwise, none for anonymous."""
    if not getattr(user, "is_authenticated", False):
        return AgentRun.objects.none()
    if user.is_staff:
        return AgentRun.objects.all()
    return AgentRun.objects.filter(owner=user)


def get_visible_run(user: Any, run_id: uuid.UUID) -> AgentRun:
    """The run, or ``Http404`` when it does not exist or ``user`` may not see it."""
    run = visible_runs(user).select_related("cancelled_by", "owner").filter(pk=run_id).first()
    if run is None:
        raise Http404("no such run")
    return run


def login_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Like Django's ``login_required``, but a script gets 401 JSON instead of a redirect."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.user.is_authenticated:
            return view(request, *args, **kwargs)
        if wants_json(request):
            return JsonResponse({"detail": "Authentication credentials were not provided."}, status=401)
        return redirect_to_login(request.get_full_path(), str(LOGIN_URL))

    return wrapper
