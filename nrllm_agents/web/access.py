"""The playground's side of ``nrllm_agents.access.policy``: the run a caller may see and act
on, else the refusal ``http.answers`` maps (404 for a run the caller may not see, exactly like
one that does not exist; 403 for one they see but may not act on); and sign-in for scripts."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from typing import Any, NoReturn

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse_lazy

from ..access import policy
from ..http import answers
from ..http.answers import Answer
from ..models import AgentRun

LOGIN_URL = reverse_lazy("nrllm_web:login")


def wants_json(request: HttpRequest) -> bool:
    """The caller is a script (``fetch`` with ``Accept: application/json``), not a form post."""
    return "application/json" in request.headers.get("Accept", "")


def visible_run(user: Any, run_id: uuid.UUID, action: policy.Action = policy.Action.SEE) -> AgentRun | Answer:
    """The run, if the policy lets ``user`` ``action`` it; else the refusal (``http.answers``):
    404 when it does not exist or ``user`` may not see it, 403 when ``user`` sees it but may not
    act on it."""
    run = policy.visible_runs(user).filter(pk=run_id).first()
    refused = answers.refusal(policy.verdict(user, action, run), action)
    if refused is not None:
        return refused
    assert run is not None
    return run


def get_visible_run(user: Any, run_id: uuid.UUID, action: policy.Action = policy.Action.SEE) -> AgentRun:
    """The run, if the policy lets ``user`` ``action`` it.

    Raises ``Http404`` when it does not exist or ``user`` may not see it, ``PermissionDenied``
    when ``user`` sees it but may not act on it.
    """
    run = visible_run(user, run_id, action)
    if isinstance(run, Answer):
        raise_refusal(run, "no such run")
    return run


def raise_refusal(refused: Answer, not_found: str) -> NoReturn:
    """A refusal as Django's own pages say it: ``Http404`` (``not_found``) or ``PermissionDenied``."""
    if refused.status == 404:
        raise Http404(not_found)
    raise PermissionDenied(refused.detail)


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
