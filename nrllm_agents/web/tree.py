"""The tree section of a run's page: who called the run (its parent and root) and the sub-agent
runs below it, each with its status, spend and a link, indented by depth.

The page re-fetches the section (``playground/runs/<id>/tree/``) while the run or any run below
it is active: children run on other executors, so the run's own stream does not say when one
of them moves.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from ..access import policy
from ..models import ACTIVE, AgentRun
from ..presentation import trees
from .access import get_visible_run, login_required


def context(run: AgentRun, user: Any = None) -> dict[str, Any]:
    """What ``_run_tree.html`` shows of ``run``: ``shown`` is false for a run of no tree that
    offers no sub-agents (the section stays hidden); ``active`` while the run or a run below it
    may still move (the page keeps re-fetching the section); ``awaiting``, the runs below it that
    wait for approval, which ``user`` may decide from here when the policy lets them."""
    below = trees.outline(run)[1:]  # depth first, the run itself left out
    for entry in below:
        entry["indent"] = entry["depth"] - run.tree_depth - 1
    offers = bool((run.options or {}).get("agents"))
    return {
        "parent_id": run.tree_parent_id,
        "root_id": run.tree_root_id,
        "call_sequence": run.tree_call_sequence,
        "depth": run.tree_depth,
        "runs": below,
        "spend": trees.tree_dict(run)["spend"] if below else None,
        "shown": bool(run.tree_parent_id or below or offers),
        "active": run.status in ACTIVE or any(entry["status"] in ACTIVE for entry in below),
        "url": reverse("nrllm_web:run-tree", args=[run.pk]),
        "awaiting": trees.awaiting_approval([entry["run_id"] for entry in below]),
        "approve_url": reverse("nrllm_web:approve", args=[run.pk]),
        "may_approve": user is not None and policy.may(user, policy.Action.APPROVE, run),
    }


@require_GET
@login_required
def run_tree(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """The tree section alone: whoever may see the run sees the runs of its subtree (they are its
    owner's, and visible to whoever may see their parent)."""
    run = get_visible_run(request.user, run_id)
    response = render(request, "nrllm_agents/_run_tree.html", {"run": run, "tree": context(run, request.user)})
    response["Cache-Control"] = "no-store"
    return response
