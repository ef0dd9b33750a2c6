"""The calls the runtime, the segment and the store make: each counts and logs one event, and
traces it when this process traces (``spans``).

Every hook is one line (or one decorator) at its call site, so the instrumented modules stay
easy to read and to merge. A hook never changes what the caller does, and never raises into
it: a metrics or logging failure is logged and swallowed.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from ..domain import Usage
from ..models import ACTIVE, TERMINAL, AgentRun, RunStatus
from ..store import Reaped
from . import metrics, spans
from .logs import bind_segment, run_event, unbind_segment

logger = logging.getLogger(__name__)
F = TypeVar("F", bound=Callable[..., Any])


def boundary_written(seconds: float) -> None:
    """One step boundary write (``store.record_step``) took ``seconds``: to
    ``nrllm_boundary_write_seconds``. Timed by its caller, the segment (the store imports
    nothing above it); on the hot path, so it is the observation and nothing more."""
    metrics.BOUNDARY_WRITE_SECONDS.observe(seconds)


def _guarded(hook: F) -> F:
    @functools.wraps(hook)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return hook(*args, **kwargs)
        except Exception:
            logger.exception("observability hook %s failed; ignored", hook.__name__)
            return None

    return wrapper  # type: ignore[return-value]


def _provider_label(provider: str | None) -> str:
    from ..catalog import registry

    if not provider:
        return "unknown"
    return provider if registry.is_known_provider(provider) else "other"


def _tool_label(name: Any) -> str:
    from ..catalog import registry

    label = str(name or "")
    return label if registry.is_known_tool(label) else "other"


def _provider_of(run_id: uuid.UUID) -> str:
    return _provider_label(AgentRun.objects.filter(pk=run_id).values_list("provider", flat=True).first())


def _finished(status: str, reason: str, provider: str) -> None:
    metrics.RUNS_FINISHED.labels(status, reason or "none", provider).inc()
    if status == RunStatus.FAILED:
        metrics.RUNS_FAILED.labels(reason or "none", provider).inc()


_step_children: dict[tuple[str, str], Any] = {}


def _step_seconds(kind: str, tool: str) -> Any:
    """``STEP_SECONDS.labels(kind, tool)``, kept: looked up at every step, and the labels are
    bounded (two kinds, the known tools and ``other``)."""
    child = _step_children.get((kind, tool))
    if child is None:
        child = _step_children[(kind, tool)] = metrics.STEP_SECONDS.labels(kind, tool)
    return child


# --- runs ----------------------------------------------------------------------------------
@_guarded
def started(run: AgentRun, mode: str) -> None:
    """A run was created: ``interactive`` (executes here) or ``queued``."""
    metrics.RUNS_STARTED.labels(mode, _provider_label(run.provider)).inc()
    run_event(
        "start" if mode == "interactive" else "enqueue",
        run.pk,
        "created (%s, %s)",
        mode,
        run.provider,
        segment=run.claimed_by or None,
        provider=run.provider,
    )


@_guarded
def claimed(run_id: uuid.UUID, segment: str, claim: Any) -> None:
    """A worker tried to claim a queued run; ``claim`` is the store's ``Transition``."""
    if claim.applied:
        run_event("claim", run_id, "claimed by %s", segment, segment=segment)
    else:
        run_event(
            "claim_lost", run_id, "claim lost (the run is %s)", claim.status, segment=segment, status=claim.status
        )


@_guarded
def step(trace: Any, step: Any, sequence: int) -> None:
    """A step was recorded at a boundary: its duration, its tokens, a DEBUG ``boundary`` line,
    and the end of its call's span when the segment is traced."""
    if trace.spans is not None:
        trace.spans.step(step, sequence)
    kind, payload = step.kind.value, step.payload if isinstance(step.payload, dict) else {}
    if kind == "request":
        trace._obs_model = (str(payload.get("provider") or ""), str(payload.get("model") or ""))
    elif step.duration_ms is not None and kind in ("llm", "tool"):
        tool = _tool_label(payload.get("name")) if kind == "tool" else ""
        _step_seconds(kind, tool).observe(max(0.0, float(step.duration_ms)) / 1000)
    if kind == "llm":
        usage = payload.get("usage")
        usage = usage if isinstance(usage, dict) else {}
        prompt, completion = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
        if prompt or completion:  # only a model that answered names a label: bounded by real models
            provider, model = getattr(trace, "_obs_model", ("", ""))
            labels = (_provider_label(provider), metrics.model_label(model))
            metrics.TOKENS.labels(*labels, "prompt").inc(prompt)
            metrics.TOKENS.labels(*labels, "completion").inc(completion)
            cost = Usage.from_dict(usage).cost
            if cost:
                currency = metrics.bounded(str((payload.get("price") or {}).get("currency") or ""))
                metrics.SPEND.labels(*labels, currency).inc(float(cost))
    run_event(
        "boundary",
        trace.run_id,
        "step %d %s recorded",
        sequence,
        kind,
        level=logging.DEBUG,
        segment=trace.owner,
        sequence=sequence,
        kind=kind,
        duration_ms=step.duration_ms,
    )


@_guarded
def closed(run: AgentRun, fence: Any, outcome: Any) -> None:
    """A segment's settle or suspend fence: count a terminal write it made, log ``settle``."""
    if fence.applied and run.status in TERMINAL:
        _finished(run.status, run.termination_reason, _provider_label(run.provider))
    run_event(
        "settle",
        run.pk,
        "%s (status %s, reason %s, applied %s)",
        outcome,
        run.status,
        run.termination_reason or "-",
        fence.applied,
        level=logging.INFO if fence.applied else logging.WARNING,
        status=run.status,
        reason=run.termination_reason,
        outcome=str(outcome),
        applied=fence.applied,
    )


@_guarded
def requeued(run_id: uuid.UUID, trace: Any, count_attempt: bool, delay: float, error: Any = None) -> None:
    """A segment handed its run back to the queue: a retry (counts an attempt) or a hand-off."""
    kind = "retry" if count_attempt else "handoff"
    metrics.RETRIES.labels(kind).inc()
    run_event(
        "requeue",
        run_id,
        "handed back to the queue (%s, in %.1f s)%s",
        kind,
        delay,
        f": {type(error).__name__}" if error else "",
        level=logging.WARNING,
        segment=trace.owner,
        sequence=trace.last_sequence,
        kind=kind,
    )


@_guarded
def enqueue_failed(run_id: uuid.UUID, exc: BaseException) -> None:
    """The queue refused a run's job; the runtime has just settled it failed."""
    metrics.ENQUEUE_FAILURES.inc()
    row = AgentRun.objects.filter(pk=run_id).values("status", "termination_reason", "provider").first()
    if row and row["status"] == RunStatus.FAILED and row["termination_reason"] == "enqueue_failed":
        _finished(RunStatus.FAILED, "enqueue_failed", _provider_label(row["provider"]))
    run_event("enqueue_failed", run_id, "the queue refused the job (%s)", type(exc).__name__, level=logging.ERROR)


@_guarded
def enqueue_deferred(run_id: uuid.UUID, exc: BaseException) -> None:
    """The queue (or the database) was unreachable for a run's job; the run stays queued for
    the queued sweep."""
    metrics.ENQUEUE_DEFERRED.inc()
    run_event(
        "enqueue_deferred",
        run_id,
        "not dispatched for now (%s); the run stays queued and the queued sweep dispatches it",
        type(exc).__name__,
        level=logging.WARNING,
    )


def segment(execute: F) -> F:
    """Decorator of the runtime's ladder: bind the segment to log records, count its outcome,
    and make it an ``invoke_agent`` span when this process traces (``spans.begin``)."""

    @functools.wraps(execute)
    def wrapper(self: Any, run_id: uuid.UUID, request: Any, trace: Any, drive: Any) -> Any:
        token = bind_segment(trace)
        trace.spans = spans.begin(trace, run_id, request)
        result, error = None, None
        try:
            result = execute(self, run_id, request, trace, drive)
        except BaseException as exc:
            error = exc
            raise
        finally:
            if trace.spans is not None:
                trace.spans.end(result, error)
                trace.spans = None
            unbind_segment(token)
        _segment_done(trace, result)
        return result

    return wrapper  # type: ignore[return-value]


@_guarded
def _segment_done(trace: Any, result: Any) -> None:
    outcome = str(getattr(result.outcome, "value", result.outcome))
    metrics.SEGMENTS.labels(trace.owner.split(":", 1)[0], outcome).inc()
    if outcome == "lease_lost":
        metrics.LEASE_LOSSES.inc()
        run_event(
            "lease_lost",
            trace.run_id,
            "lease lost; this segment stopped without writing",
            level=logging.WARNING,
            segment=trace.owner,
            sequence=trace.last_sequence,
        )


# --- cancels -------------------------------------------------------------------------------
def cancel(method: F) -> F:
    """Decorator of ``AgentRuntime.cancel``: count and log what the cancel did."""

    @functools.wraps(method)
    def wrapper(self: Any, run_id: Any, *args: Any, source: str, **kwargs: Any) -> Any:
        result = method(self, run_id, *args, source=source, **kwargs)
        _cancel_done(result, source)
        return result

    return wrapper  # type: ignore[return-value]


@_guarded
def tree_cancelled(run_id: Any, cascaded: int) -> None:
    """A cancel of ``run_id`` also cancelled ``cascaded`` runs below it."""
    metrics.CASCADED_CANCELS.inc(cascaded)
    run_event("tree_cancel", run_id, "cancel covered %d runs below it", cascaded, cascaded=cascaded)


@_guarded
def children_started(run_id: Any, count: int) -> None:
    """A turn of ``run_id`` started ``count`` child runs (its sub-agents')."""
    metrics.CHILD_RUNS.inc(count)
    run_event("children", run_id, "started %d sub-agent runs", count, children=count)


@_guarded
def _cancel_done(result: Any, source: str) -> None:
    outcome = str(result.outcome.value)
    if outcome == "cancelled":
        provider = _provider_label(result.provider) if result.provider is not None else _provider_of(result.run_id)
        metrics.RUNS_CANCELLED.labels(metrics.bounded(source), result.previous_status, provider).inc()
        _finished(RunStatus.CANCELLED, "cancelled", provider)
    run_event(
        "cancel",
        result.run_id,
        "cancel from %s: %s (was %s)",
        source,
        outcome,
        result.previous_status,
        source=source,
        outcome=outcome,
        previous_status=result.previous_status,
    )


def cancel_many(method: F) -> F:
    """Decorator of ``AgentRuntime.cancel_many``: count by previous status and provider."""

    @functools.wraps(method)
    def wrapper(self: Any, selection: Any, *args: Any, source: str, dry_run: bool = False, **kwargs: Any) -> Any:
        before = None if dry_run else _active_by_provider(selection)
        result = method(self, selection, *args, source=source, dry_run=dry_run, **kwargs)
        if before is not None:
            _bulk_done(result, before, source)
        return result

    return wrapper  # type: ignore[return-value]


@_guarded
def _active_by_provider(selection: Any) -> dict[str, list[tuple[str, int]]]:
    from django.db.models import Count

    found: dict[str, list[tuple[str, int]]] = {}
    rows = (
        selection.filter(status__in=[s.value for s in ACTIVE])
        .order_by()
        .values_list("status", "provider")
        .annotate(n=Count("pk"))
    )
    for status, provider, n in rows:
        found.setdefault(status, []).append((_provider_label(provider), n))
    return found


@_guarded
def _bulk_done(result: Any, before: dict[str, list[tuple[str, int]]], source: str) -> None:
    for previous, total in result.cancelled.items():
        left = total
        for provider, n in before.get(previous, []) + [("other", total)]:  # counted just before the cancel
            take = min(n, left)
            if take:
                metrics.RUNS_CANCELLED.labels(metrics.bounded(source), previous, provider).inc(take)
                metrics.RUNS_FINISHED.labels(RunStatus.CANCELLED, "cancelled", provider).inc(take)
            left -= take
    if result.cascaded:  # the selected runs' sub-agent runs, cancelled with them
        metrics.CASCADED_CANCELS.inc(result.cascaded)
    logging.getLogger("nrllm_agents.runs").info(
        "bulk cancel from %s: %s (and %d runs below them)",
        source,
        result.cancelled,
        result.cascaded,
        extra={
            "event": "bulk_cancel",
            "source": source,
            "cancelled": result.cancelled_total,
            "cascaded": result.cascaded,
        },
    )


@_guarded
def cancel_acknowledged(trace: Any, event: Any) -> None:
    """A segment stopped for a cancel and appended ``cancelled``: the cancel-to-stop latency."""
    if trace.spans is not None:
        trace.spans.cancelled(event.payload or {})
    requested = (event.payload or {}).get("requested_at")
    if requested:
        latency = (event.created_at - datetime.fromisoformat(requested)).total_seconds()
        metrics.CANCEL_STOP_SECONDS.observe(max(0.0, latency))
    run_event(
        "acknowledge",
        trace.run_id,
        "stopped for a cancel after step %s",
        event.payload.get("boundary_sequence"),
        segment=trace.owner,
        sequence=event.sequence,
        boundary_sequence=(event.payload or {}).get("boundary_sequence"),
    )


# --- the reaper ----------------------------------------------------------------------------
@_guarded
def reaped_run(reaped: Reaped) -> None:
    """The reaper requeued or dead-lettered one run whose lease expired (``applied``), or found it
    alive. All it needs came back in the reaper's report (``store.Reaped``): no query here."""
    if not reaped.applied:
        run_event("reap_skipped", reaped.run_id, "renewed its lease meanwhile; left alone")
        return
    if reaped.verdict == "requeue":
        metrics.REAPER_ACTIONS.labels("requeued", "lease_expired").inc()
    elif reaped.verdict == "in_doubt":  # requeued with its stamp: the next segment asks a person
        metrics.REAPER_ACTIONS.labels("requeued", "in_doubt").inc()
    else:
        metrics.REAPER_ACTIONS.labels("dead_lettered", reaped.verdict).inc()
        _finished(RunStatus.FAILED, reaped.verdict, _provider_label(reaped.provider))
    run_event("reap", reaped.run_id, "lease expired: %s", reaped.verdict, level=logging.WARNING, verdict=reaped.verdict)


def reap(method: F) -> F:
    """Decorator of ``AgentRuntime.reap``: count what the pass did to each run (from its report)
    and the pass itself, remember it for the operations page."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        started_at = datetime.now().astimezone()
        report = method(self, *args, **kwargs)
        if not report.dry_run:
            for reaped in report.reaped:
                reaped_run(reaped)
            _reap_done(report, started_at)
        return report

    return wrapper  # type: ignore[return-value]


@_guarded
def _reap_done(report: Any, started_at: datetime) -> None:
    from ..models import ReaperPass

    metrics.REAPER_PASSES.inc()
    if report.acknowledged:
        metrics.REAPER_ACTIONS.labels("acknowledged", "cancelled").inc(report.acknowledged)
    ReaperPass.record(report, started_at)
    logging.getLogger("nrllm_agents.runs").info(
        "reaper pass: %s",
        report.summary(),
        extra={
            "event": "reap_pass",
            "requeued": len(report.requeued),
            "acknowledged": report.acknowledged,
            "dead_lettered": sum(report.dead_lettered.values()),
            "skipped": report.skipped,
        },
    )
