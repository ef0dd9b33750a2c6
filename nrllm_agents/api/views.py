"""The REST API over ``AgentRuntime``: list, create, inspect, approve and cancel runs.

Every view calls the runtime and maps its result to an HTTP answer; none writes a status. A
refusal or a domain error (not found, not pending, a refused enqueue, an invalid request)
propagates to the handler, which answers it as ``http.answers`` says.
Who may see and act on which run is ``nrllm_agents.access.policy``'s decision: a run the caller may
not see answers 404 with the same body as one that does not exist (and as a malformed id); a
visible run the caller may not act on answers 403.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import Q, QuerySet
from django.urls import reverse
from drf_spectacular.utils import OpenApiResponse
from rest_framework import generics, status
from rest_framework.request import Request
from rest_framework.response import Response

from ..access import policy
from ..models import AgentRun, CancelSource
from ..presentation.outcomes import bulk_wording, cancel_wording, queued_wording
from ..presentation.presenters import event_dict, stream_finished
from ..runtime.agent_runtime import CancelOutcome, RunNotFound
from ..validation.run_request import RunRequest
from . import responses as r
from . import serializers as s
from .base import RunAPIView, RunPagination, checked_body, refuse_provider, sync_slot, with_children
from .fields import query_data
from .schema import AUTH_ERRORS, BAD_REQUEST, ENQUEUE_FAILED, NOT_FOUND, RUN_ID, STARTS, THROTTLED, extend_schema
from .throttling import CANCEL_SCOPE, CREATE_SCOPE


class RunListCreateView(generics.ListAPIView[AgentRun], RunAPIView):
    """``GET /api/runs/`` (newest first, filtered, paginated) and ``POST /api/runs/``."""

    serializer_class = r.RunSerializer
    pagination_class = RunPagination
    post_throttle_scope = CREATE_SCOPE

    expand_request = False

    def get_serializer_context(self) -> dict[str, Any]:
        return {**super().get_serializer_context(), "expand_request": self.expand_request}

    def get_queryset(self) -> QuerySet[AgentRun]:
        query = query_data(self.request.query_params, lists=("status", "termination_reason"))
        root = query.pop("root", None)
        filters = s.RunFilterSerializer(data=query)
        filters.is_valid(raise_exception=True)
        f = filters.validated_data
        self.expand_request = f.get("expand") == "request"
        runs = with_children(policy.visible_runs(self.request.user), self.request.user).order_by("-created_at", "-pk")
        if f.get("status"):
            runs = runs.filter(status__in=f["status"])
        if f.get("termination_reason"):
            runs = runs.filter(termination_reason__in=f["termination_reason"])
        if "created_after" in f:
            runs = runs.filter(created_at__gte=f["created_after"])
        if "created_before" in f:
            runs = runs.filter(created_at__lt=f["created_before"])
        if root is not None:  # a tree: its root and every run below it
            tree = s.TreeRootSerializer(data={"root": root})
            tree.is_valid(raise_exception=True)
            runs = runs.filter(Q(pk=tree.validated_data["root"]) | Q(tree_root_id=tree.validated_data["root"]))
        return runs

    @extend_schema(
        operation_id="runs_list",
        summary="List runs",
        parameters=[s.RunFilterSerializer, s.TreeRootSerializer],
        description="The caller's runs (staff: all runs), newest first. Repeat `status` or "
        "`termination_reason` to match any of several values.",
        responses={
            200: r.RunSerializer(many=True),
            **BAD_REQUEST,
            **AUTH_ERRORS,
            404: OpenApiResponse(r.ErrorSerializer, "No such page."),
        },
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    @extend_schema(
        operation_id="runs_create",
        summary="Start a run",
        request=s.CreateRunSerializer,
        description="Validate the request, then queue it for a worker (`mode` queued, the default: 202) "
        "or execute it in this request (`mode` sync: 201 with the settled run and its outcome).",
        responses={
            202: OpenApiResponse(
                r.RunOutcomeSerializer,
                "Queued: a worker will run it (`outcome` `waiting_for_queue`: once the queue is reachable again).",
            ),
            201: OpenApiResponse(r.RunOutcomeSerializer, "Executed here: the run and its outcome."),
            **BAD_REQUEST,
            **AUTH_ERRORS,
            **STARTS,
            **THROTTLED,
            **ENQUEUE_FAILED,
        },
    )
    def post(self, request: Request) -> Response:
        fields = checked_body(request, s.CreateRunSerializer)
        mode = fields.pop("mode", "queued")
        run_request = RunRequest.from_mapping(fields, viewer=request.user)
        refuse_provider(run_request.provider)
        if mode == "sync":
            with sync_slot(request):
                result = self.runtime.run(run_request, owner=request.user)
            return Response(
                {**self.fresh(result.run_id), "outcome": result.outcome.value},
                status=status.HTTP_201_CREATED,
                headers=self._location(result.run_id),
            )
        queued = self.runtime.submit(run_request, owner=request.user)
        run_id, wording = queued.run_id, queued_wording(queued.outcome)  # a queue outage is still 202: it waits
        return Response(
            {**self.fresh(run_id), "outcome": queued.outcome.value, "detail": wording.sentence(run_id)},
            status=wording.http_status,
            headers=self._location(run_id),
        )

    @staticmethod
    def _location(run_id: Any) -> dict[str, str]:
        return {"Location": reverse("nrllm_api:run-detail", args=[run_id])}


class RunDetailView(RunAPIView):
    @extend_schema(
        operation_id="runs_retrieve",
        summary="Show a run",
        parameters=[RUN_ID],
        description="Status, termination reason, request, timestamps, usage, the calls awaiting approval "
        "if any, and the cancel record. Its forks: `parent` and `children`. Its tree of runs: `parent_id` (the "
        "run whose sub-agent call started it), `root_id`, `depth`, and `tree`: its sub-agent runs "
        "(`tree.children`, each with its status and spend) and its subtree's spend (`tree.spend`).",
        responses={200: r.RunSerializer, **AUTH_ERRORS, **NOT_FOUND},
    )
    def get(self, request: Request, id: str) -> Response:
        return Response(r.run_representation(self.get_run(id), tree=True))


class RunCancelView(RunAPIView):
    post_throttle_scope = CANCEL_SCOPE

    @extend_schema(
        operation_id="runs_cancel",
        summary="Cancel a run",
        parameters=[RUN_ID],
        request=s.CancelRequestSerializer,
        description="Cancel a queued, running or waiting run. A running run is interrupted: its model call or "
        "tool in flight is cut short and recorded as an interrupted step, then a `cancelled` step.",
        responses={
            202: OpenApiResponse(
                r.CancelResponseSerializer,
                "It was executing: its step in flight is "
                "interrupted, and `run.cancel.stopped_at` fills in when it has stopped.",
            ),
            200: OpenApiResponse(
                r.CancelResponseSerializer,
                "It was queued or waiting (now cancelled, "
                "nothing executing), or already cancelled (`outcome` says so).",
            ),
            409: OpenApiResponse(r.CancelResponseSerializer, "It had completed or failed; nothing changed."),
            **BAD_REQUEST,
            **AUTH_ERRORS,
            **NOT_FOUND,
            **THROTTLED,
        },
    )
    def post(self, request: Request, id: str) -> Response:
        run = self.get_run(id, policy.Action.CANCEL)
        body = s.CancelRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        result = self.runtime.cancel(
            run.pk, by=request.user, source=CancelSource.API, reason=body.validated_data["reason"]
        )
        if result.outcome == CancelOutcome.NOT_FOUND:  # deleted in between
            raise RunNotFound(run.pk)
        wording = cancel_wording(result)
        detail, code = wording.sentence(run.pk), wording.http_status
        return Response(
            {
                "run_id": str(run.pk),
                "outcome": result.outcome.value,
                "previous_status": result.previous_status,
                "status": result.status,
                "stopping": result.was_executing,
                "detail": detail,
                "run": self.fresh(run.pk),
            },
            status=code,
        )


def decision_responses(conflict: str) -> dict[int, Any]:
    """The answers of a decision on a waiting run (approve, resolve); ``conflict``: when it is a 409."""
    return {
        200: OpenApiResponse(r.RunOutcomeSerializer, "Resumed here: the run decided and its outcome."),
        202: OpenApiResponse(r.RunOutcomeSerializer, "Decision stored: a worker resumes the run."),
        409: OpenApiResponse(r.ConflictSerializer, conflict),
        **BAD_REQUEST,
        **AUTH_ERRORS,
        **NOT_FOUND,
        **THROTTLED,
        **ENQUEUE_FAILED,
    }


class RunApproveView(RunAPIView):
    @extend_schema(
        operation_id="runs_approve",
        summary="Approve or deny a waiting run",
        parameters=[RUN_ID],
        request=s.ApproveRequestSerializer,
        description="Decide on the calls a waiting run holds, then resume it here, or (`queued`) hand it to a worker. "
        "On a run that waits for its sub-agents (the root of a tree), the decision is for the one run below it "
        "that waits for approval, or for the one `run_id` names when several wait; the answer shows that run.",
        responses=decision_responses(
            "The run (and its tree) is not waiting for approval, its call is in doubt (resolve it), or several "
            "runs below it wait (`waiting_for_approval` lists them: name one in `run_id`)."
        ),
    )
    def post(self, request: Request, id: str) -> Response:
        run = self.get_run(id, policy.Action.APPROVE)
        body = s.ApproveRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        decided = body.validated_data
        return resumed(
            self,
            request,
            run,
            decided,
            lambda target: self.runtime.approve(
                target, decided["approved"], by=request.user, queued=decided["queued"], reason=decided["reason"]
            ),
        )


def resumed(
    view: RunAPIView, request: Request, run: Any, decided: dict[str, Any], decide: Callable[[Any], Any]
) -> Response:
    """Take a decision on a waiting run (``decide(target)``): the run named, or the one below it in
    its tree that waits (``run_id`` picks one of several), asked of the policy as its root is.
    Not pending, several pending, not found, a refused enqueue: answered by the handler
    (``http.answers``). Resumed here (200), or queued for a worker (202)."""
    queued = decided["queued"]
    target = view.runtime.approval_target(run.pk, pick=decided.get("run_id"))
    if target != run.pk:
        view.get_run(str(target), policy.Action.APPROVE)
    slot = None if queued else sync_slot(request)
    try:
        result = decide(target)
    finally:
        if slot is not None:
            slot.release()
    return Response(
        {**view.fresh(target), "outcome": result.outcome.value},
        status=status.HTTP_202_ACCEPTED if queued else status.HTTP_200_OK,
    )


class RunResolveView(RunAPIView):
    @extend_schema(
        operation_id="runs_resolve",
        summary="Decide on a call in doubt",
        parameters=[RUN_ID],
        request=s.ResolveRequestSerializer,
        description="A run whose worker was lost during a non-idempotent call waits with the call in doubt "
        "(`suspended_state.in_doubt`, `in_doubt` in the run): it may or may not have happened. Say which, then "
        "the run resumes here, or (`queued`) in a worker: `happened: true` records `result` as the call's result "
        "and does not make it again; `happened: false` makes it again. The third decision is a cancel. The "
        "decision is a step of the run (who, why, which call). Asks the approve permission.",
        responses=decision_responses(
            "The run is not waiting, or it waits for an approval with no call in doubt (approve or deny it)."
        ),
    )
    def post(self, request: Request, id: str) -> Response:
        run = self.get_run(id, policy.Action.APPROVE)
        body = s.ResolveRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        decided = body.validated_data
        return resumed(
            self,
            request,
            run,
            decided,
            lambda target: self.runtime.resolve(
                target,
                decided["happened"],
                result=decided["result"],
                by=request.user,
                queued=decided["queued"],
                reason=decided["reason"],
            ),
        )


class RunEventsView(RunAPIView):
    @extend_schema(
        operation_id="runs_events",
        summary="Read a run's step stream",
        parameters=[RUN_ID, s.EventsQuerySerializer],
        description="Recorded steps with a sequence greater than `after`, in order. Poll with "
        "`after=next_after` until `finished`.",
        responses={200: r.EventPageSerializer, **BAD_REQUEST, **AUTH_ERRORS, **NOT_FOUND},
    )
    def get(self, request: Request, id: str) -> Response:
        run = self.get_run(id)  # read before the steps, so "finished" never hides a step
        query = s.EventsQuerySerializer(data=query_data(request.query_params))
        query.is_valid(raise_exception=True)
        after, limit = query.validated_data["after"], query.validated_data["limit"]
        events = self.runtime.events(run.pk, after=after, limit=limit + 1)
        page = events[:limit]
        return Response(
            {
                "run_id": str(run.pk),
                "status": run.status,
                "finished": stream_finished(run),
                "results": [event_dict(e) for e in page],
                "next_after": page[-1].sequence if page else after,
                "has_more": len(events) > limit,
            }
        )


class BulkCancelView(RunAPIView):
    post_throttle_scope = CANCEL_SCOPE

    @extend_schema(
        operation_id="runs_bulk_cancel",
        summary="Cancel many runs",
        request=s.BulkCancelRequestSerializer,
        description="Cancel the selected runs the caller may cancel (their own; every run for staff holding "
        "`cancel_agentrun`), in a constant number of statements: by "
        "`ids`, or by `status` (and `created_before`). `dry_run` only counts.",
        responses={200: r.BulkCancelResponseSerializer, **BAD_REQUEST, **AUTH_ERRORS, **THROTTLED},
    )
    def post(self, request: Request) -> Response:
        body = s.BulkCancelRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        v = body.validated_data
        selection = policy.actionable_runs(request.user, policy.Action.BULK_CANCEL)
        if "ids" in v:
            selection = selection.filter(pk__in=v["ids"])
        else:
            selection = selection.filter(status__in=v["status"])
            if "created_before" in v:
                selection = selection.filter(created_at__lt=v["created_before"])
        result = self.runtime.cancel_many(
            selection, by=request.user, source=CancelSource.API, reason=v["reason"], dry_run=v["dry_run"]
        )
        matched = result.cancelled_total + sum(result.unchanged.values())
        return Response(
            {
                "dry_run": result.dry_run,
                "matched": matched,
                "cancelled": result.cancelled,
                "unchanged": result.unchanged,
                "cancelled_total": result.cancelled_total,
                "not_found": max(len(set(v["ids"])) - matched, 0) if "ids" in v else None,
                "detail": bulk_wording(result).text,
            }
        )
