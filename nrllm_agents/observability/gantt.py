"""A run's picture: its steps over time as an SVG Gantt strip, and its tokens by round.

Everything is computed here and drawn by ``templates/nrllm_agents/_run_picture.html`` as inline
SVG: no script, no chart library, nothing fetched, so it works offline and without JavaScript.
Time runs left to right to scale, from the run's creation to its stop (or now). One lane per
kind of work: the queue wait, model calls, each tool (the busiest ``MAX_TOOL_LANES`` by name,
the rest together), approval waits, and a run's sub-agent runs (``MAX_CHILD_LANES``, running
ones growing); the cancel request and the stop are vertical markers across all lanes. Each bar
has a ``<title>`` (the browser's hover tooltip) saying what it was. A bar is at least
``MIN_BAR`` pixels wide, so a 2 ms tool call in a 10 minute run stays visible.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from ..models import AgentRun
from ..money import amounts

WIDTH = 960
LABEL_WIDTH = 120
PLOT_WIDTH = WIDTH - LABEL_WIDTH - 16
LANE_HEIGHT = 22
TOP = 26  # room for the marker labels
AXIS_HEIGHT = 24
MIN_BAR = 1.5
MAX_TOOL_LANES = 6
MAX_CHILD_LANES = 4
ACTIVE_STATUSES = ("queued", "running", "waiting_for_approval", "waiting_for_children")
SPEND_HEIGHT = 90
MERGE_LABELS = 130  # px: markers closer than this have their labels on opposite sides
LABEL_ANCHOR_END = 700  # px: a marker right of this has its label on its left


@dataclass(frozen=True)
class Bar:
    """One span of work (or waiting) in a lane, in SVG coordinates."""

    x: float
    y: float
    width: float
    kind: str  # css class suffix: queue, llm, tool, approval, interrupted, error, pending, child
    title: str
    sequence: int | None = None


@dataclass(frozen=True)
class Marker:
    """A vertical line across the lanes: ``cancel`` (requested) or ``stop``."""

    x: float
    kind: str
    label: str
    title: str
    anchor: str = ""  # "start" (the label right of the line) or "end"; "" for by position

    @property
    def text_anchor(self) -> str:
        return self.anchor or ("end" if self.x > LABEL_ANCHOR_END else "start")


@dataclass
class Picture:
    """What the template draws."""

    width: int
    height: int
    lanes: list[tuple[str, float]] = field(default_factory=list)  # (label, y of its top)
    bars: list[Bar] = field(default_factory=list)
    ticks: list[tuple[float, str]] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    span_seconds: float = 0.0
    steps: int = 0
    plot_left: int = LABEL_WIDTH
    plot_right: int = LABEL_WIDTH + PLOT_WIDTH
    axis_y: float = 0.0
    spend: Spend | None = None
    in_flight: InFlight | None = None

    @property
    def plot_width(self) -> int:
        return self.plot_right - self.plot_left

    @property
    def span_label(self) -> str:
        return _seconds(self.span_seconds)


@dataclass(frozen=True)
class InFlight:
    """The work a running run is doing now, not recorded yet: a model call or a tool call."""

    kind: str  # "llm" or "tool"
    name: str  # the tool's name; "" for a model call
    round: int
    since: datetime  # when it started: the last recorded step
    remaining: list[str]  # the calls of the last answer not recorded yet (this one first)

    @property
    def label(self) -> str:
        return f"tool {self.name}" if self.kind == "tool" else "model call"


def in_flight(run: Any, events: list[Any]) -> InFlight | None:
    """What ``run`` is doing between its last recorded step and now, if it is running.

    The calls the model's last answer asked for run one by one, each until its tool step is
    recorded; once none is left the model is called again, unless that answer was the final
    one (no calls) or a failure. Before any answer, the model is called. The page's JavaScript
    applies the same rule to the steps it streams (``playground.js``, from ``remaining``).
    """
    if run.status != "running" or run.started_at is None:
        return None
    recorded = [e for e in events if e.kind != "cancelled"]
    since = recorded[-1].created_at if recorded else run.started_at
    last_round = recorded[-1].round if recorded else 0
    names = remaining_calls(recorded)
    if names:
        return InFlight("tool", names[0], last_round, since, names)
    answer = next((e for e in reversed(recorded) if e.kind == "llm"), None)
    payload = answer.payload if answer is not None and isinstance(answer.payload, dict) else {}
    if answer is not None and (payload.get("error") or not payload.get("tool_calls")):
        return None  # the final answer, or a failure: the run settles next
    return InFlight("llm", "", last_round, since, [])


def remaining_calls(events: list[Any]) -> list[str]:
    """The names of the calls the last answer asked for that have no tool step yet."""
    answer = next((i for i in range(len(events) - 1, -1, -1) if events[i].kind == "llm"), None)
    if answer is None:
        return []
    payload = events[answer].payload if isinstance(events[answer].payload, dict) else {}
    calls = [str(c.get("name") if isinstance(c, dict) else "?") for c in payload.get("tool_calls") or []]
    done = sum(1 for e in events[answer + 1 :] if e.kind == "tool")
    return calls[done:]


@dataclass
class Spend:
    """Tokens by round, as columns (prompt below completion) with their totals."""

    rounds: list[dict[str, Any]]
    prompt_tokens: int
    completion_tokens: int
    height: int = SPEND_HEIGHT
    cost: str | None = None  # amounts.steps_cost of the model's answers, when they have prices

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def _seconds(value: float) -> str:
    if value < 1:
        return f"{value * 1000:.0f} ms" if value >= 0.001 or value == 0 else f"{value * 1000:.2f} ms"
    if value < 120:
        return f"{value:.2f} s" if value < 10 else f"{value:.1f} s"
    if value < 7200:
        return f"{value / 60:.1f} min"
    return f"{value / 3600:.1f} h"


def _tick_step(span: float, wanted: int = 8) -> float:
    raw = span / wanted
    magnitude = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    for factor in (1, 2, 5, 10):
        if raw <= factor * magnitude:
            return factor * magnitude
    return 10 * magnitude


def _clock(moment: datetime) -> str:
    return timezone.localtime(moment).strftime("%H:%M:%S.%f")[:-3]


def sub_agent_runs(run: Any) -> list[Any]:
    """The runs ``run``'s sub-agent calls started, oldest first (no query for a run that offers
    no sub-agents)."""
    if not (getattr(run, "options", None) or {}).get("agents"):
        return []
    fields = ("pk", "status", "created_at", "finished_at", "stopped_at", "agent_snapshot")
    return list(AgentRun.objects.filter(tree_parent_id=run.pk).order_by("created_at", "pk").only(*fields))


def build(run: Any, events: Iterable[Any], now: datetime | None = None) -> Picture:
    """The picture of ``run`` from its recorded ``events`` (in sequence order)."""
    events = list(events)
    now = now or timezone.now()
    children = sub_agent_runs(run)
    start: datetime = run.created_at
    moments = [e.created_at for e in events] + [
        m for m in (run.started_at, run.finished_at, run.stopped_at, run.cancel_requested_at) if m
    ]
    moments += [m for child in children for m in (child.finished_at, child.stopped_at) if m]
    end = max(moments) if moments else start
    if run.status in ACTIVE_STATUSES or any(child.status in ACTIVE_STATUSES for child in children):
        end = max(end, now)
    span = max((end - start).total_seconds(), 0.001)
    scale = PLOT_WIDTH / span

    def x_of(moment: datetime) -> float:
        return LABEL_WIDTH + max(0.0, min(span, (moment - start).total_seconds())) * scale

    current = in_flight(run, events)
    tools_by_use: dict[str, int] = {}
    for e in events:
        if e.kind == "tool":
            name = str((e.payload or {}).get("name") or "?")
            tools_by_use[name] = tools_by_use.get(name, 0) + 1
    if current is not None and current.kind == "tool":
        tools_by_use[current.name] = tools_by_use.get(current.name, 0) + 1
    named = sorted(tools_by_use, key=lambda n: (-tools_by_use[n], n))[:MAX_TOOL_LANES]
    lane_names = ["queue", "model"] + [f"tool {n}" for n in named]
    if len(tools_by_use) > len(named):
        lane_names.append("other tools")
    lane_names.append("approval")
    child_lanes = [f"sub-agent {i + 1}" for i in range(min(len(children), MAX_CHILD_LANES))]
    if len(children) > MAX_CHILD_LANES:
        child_lanes.append("other sub-agents")
    lane_names += child_lanes
    lane_y = {name: TOP + i * LANE_HEIGHT for i, name in enumerate(lane_names)}
    picture = Picture(
        width=WIDTH,
        height=0,
        lanes=[(n, lane_y[n]) for n in lane_names],
        steps=len(events),
        span_seconds=span,
        in_flight=current,
    )

    def bar(lane: str, begin: datetime, finish: datetime, kind: str, title: str, sequence: int | None = None) -> None:
        x0, x1 = x_of(begin), x_of(finish)
        width = max(MIN_BAR, x1 - x0)
        x0 = min(x0, LABEL_WIDTH + PLOT_WIDTH - width)
        picture.bars.append(Bar(round(x0, 2), lane_y[lane] + 3, round(width, 2), kind, title, sequence))

    if run.started_at is None:  # never claimed: queued still, or cancelled / failed while queued
        bar("queue", start, end, "queue", f"in the queue for {_seconds(span)}, never claimed")
    elif (run.started_at - start).total_seconds() > 0.001:
        waited = _seconds((run.started_at - start).total_seconds())
        bar("queue", start, run.started_at, "queue", f"waited in the queue {waited} until claimed")
    previous: Any = None
    for e in events:
        payload = e.payload if isinstance(e.payload, dict) else {}
        seconds = max(0.0, float(e.duration_ms or 0) / 1000)
        began = e.created_at - timedelta(seconds=seconds)
        interrupted = " (interrupted)" if payload.get("interrupted") else ""
        when = f"ended {_clock(e.created_at)}"
        if e.kind == "llm":
            usage = payload.get("usage")
            if not isinstance(usage, dict):
                usage = {}
            calls = [str(c.get("name")) for c in payload.get("tool_calls") or [] if isinstance(c, dict)]
            what = f"asks for {', '.join(calls)}" if calls else "answers"
            if payload.get("error"):
                what = f"failed: {str(payload.get('error'))[:80]}"
            bar(
                "model",
                began,
                e.created_at,
                "interrupted" if interrupted else ("error" if payload.get("error") else "llm"),
                f"#{e.sequence} model call, round {e.round}{interrupted}: {_seconds(seconds)}, {what}; "
                f"{usage.get('prompt_tokens', 0)}+{usage.get('completion_tokens', 0)} tokens; {when}",
                e.sequence,
            )
        elif e.kind == "tool":
            name = str(payload.get("name") or "?")
            lane = f"tool {name}" if name in named else "other tools"
            outcome = f"error: {str(payload.get('error'))[:80]}" if payload.get("error") else "ok"
            bar(
                lane,
                began,
                e.created_at,
                "interrupted" if interrupted else ("error" if payload.get("error") else "tool"),
                f"#{e.sequence} tool {name}{interrupted}: {_seconds(seconds)}, {outcome}; {when}",
                e.sequence,
            )
        elif e.kind == "approval" and previous is not None:
            decision = "approved" if payload.get("approved") else "denied"
            by = f" by {payload['by']}" if payload.get("by") else ""
            bar(
                "approval",
                previous.created_at,
                e.created_at,
                "approval",
                f"#{e.sequence} waited for approval {_seconds((e.created_at - previous.created_at).total_seconds())}, "
                f"{decision}{by}",
                e.sequence,
            )
        previous = e if e.kind != "cancelled" else previous
    for i, child in enumerate(children):
        lane = child_lanes[min(i, MAX_CHILD_LANES)]
        agent = (child.agent_snapshot or {}).get("name") or "sub-agent"
        active = child.status in ACTIVE_STATUSES
        until = end if active else (child.stopped_at or child.finished_at or end)
        took = _seconds(max(0.0, (until - child.created_at).total_seconds()))
        kind = {"completed": "child", "cancelled": "interrupted", "failed": "error"}.get(child.status, "pending")
        state = f"{child.status} for {took}" if active else f"{child.status} after {took}"
        bar(lane, child.created_at, until, kind, f"sub-agent {agent}, run {str(child.pk)[:8]}: {state}")
    if current is not None:
        lane = (
            "model" if current.kind == "llm" else (f"tool {current.name}" if current.name in named else "other tools")
        )
        ran = _seconds(max(0.0, (end - current.since).total_seconds()))
        bar(lane, current.since, end, "pending", f"{current.label} running for {ran} (round {current.round})")
    if run.status == "waiting_for_approval" and previous is not None:
        bar(
            "approval",
            previous.created_at,
            end,
            "approval",
            f"waiting for approval for {_seconds((end - previous.created_at).total_seconds())}",
        )
    elif (
        run.status == "cancelled"
        and run.cancel_requested_at
        and previous is not None
        and previous.kind == "llm"
        and (previous.payload or {}).get("tool_calls")
        and run.cancel_requested_at > previous.created_at
    ):
        # The model asked for calls that never ran and the run was cancelled later: it was waiting.
        waited = _seconds((run.cancel_requested_at - previous.created_at).total_seconds())
        bar(
            "approval",
            previous.created_at,
            run.cancel_requested_at,
            "approval",
            f"waited for approval {waited}, then cancelled",
        )
    if run.cancel_requested_at:
        who = run.cancel_source or "unknown source"
        picture.markers.append(
            Marker(
                round(x_of(run.cancel_requested_at), 2),
                "cancel",
                "cancel requested",
                f"cancel requested via {who} at {_clock(run.cancel_requested_at)}",
            )
        )
    stop = run.stopped_at or (run.finished_at if run.status in ("completed", "failed") else None)
    if stop:
        label = "stopped" if run.status == "cancelled" else run.status
        title = f"{label} at {_clock(stop)}"
        if run.cancel_requested_at and run.status == "cancelled":
            title += f", {_seconds(max(0.0, (stop - run.cancel_requested_at).total_seconds()))} after the request"
        stop_x = round(x_of(stop), 2)
        anchor = "end" if stop_x > LABEL_ANCHOR_END else "start"
        cancel = picture.markers[0] if picture.markers else None
        if cancel is not None and abs(stop_x - cancel.x) < MERGE_LABELS and run.cancel_requested_at:
            # Labels this close would overlap: the request's reads leftwards from its line, the
            # stop's rightwards from its own (both leftwards at the right edge, on two rows).
            after = _seconds(max(0.0, (stop - run.cancel_requested_at).total_seconds()))
            label = f"{label} {after} later"
            picture.markers[0] = Marker(cancel.x, cancel.kind, cancel.label, cancel.title, "end")
            anchor = "end" if stop_x > WIDTH - 110 else "start"
        picture.markers.append(Marker(stop_x, "stop", label, title, anchor))
    picture.axis_y = TOP + len(lane_names) * LANE_HEIGHT + 4
    step = _tick_step(span)
    t = 0.0
    while t <= span + 1e-9:
        picture.ticks.append((round(LABEL_WIDTH + t * scale, 2), _seconds(t) if t else "0"))
        t += step
    picture.height = int(picture.axis_y + AXIS_HEIGHT)
    picture.spend = spend(events)
    return picture


def spend(events: Iterable[Any]) -> Spend | None:
    """Tokens by round from the model's answers; ``None`` when no answer reported usage."""
    events = list(events)
    by_round: dict[int, list[int]] = {}
    for e in events:
        if e.kind != "llm" or not isinstance(e.payload, dict) or not isinstance(e.payload.get("usage"), dict):
            continue
        usage = e.payload["usage"]
        tokens = by_round.setdefault(e.round, [0, 0])
        tokens[0] += int(usage.get("prompt_tokens") or 0)
        tokens[1] += int(usage.get("completion_tokens") or 0)
    if not any(p or c for p, c in by_round.values()):
        return None
    peak = max(p + c for p, c in by_round.values()) or 1
    slot = PLOT_WIDTH / max(len(by_round), 1)
    width = max(1.0, min(slot * 0.8, 40))
    inner = SPEND_HEIGHT - 20
    rounds: list[dict[str, Any]] = []
    for i, (number, (prompt, completion)) in enumerate(sorted(by_round.items())):
        hp, hc = inner * prompt / peak, inner * completion / peak
        x = LABEL_WIDTH + i * slot + (slot - width) / 2
        rounds.append(
            {
                "round": number,
                "prompt": prompt,
                "completion": completion,
                "total": prompt + completion,
                "x": round(x, 2),
                "width": round(width, 2),
                "prompt_y": round(SPEND_HEIGHT - 4 - hp, 2),
                "prompt_h": round(hp, 2),
                "completion_y": round(SPEND_HEIGHT - 4 - hp - hc, 2),
                "completion_h": round(hc, 2),
            }
        )
    cost = amounts.steps_cost(e.payload for e in events if e.kind == "llm")
    prompt_tokens = sum(p for p, _ in by_round.values())
    return Spend(rounds, prompt_tokens, sum(c for _, c in by_round.values()), cost=cost)
