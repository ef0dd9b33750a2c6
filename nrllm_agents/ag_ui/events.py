"""A run's stored steps and live deltas as AG-UI events, each with the id a reconnect resumes
after.

Every event a step gives has the id ``<sequence>.<index>``: the same step always gives the same
events, so a client that names one (``Last-Event-ID``) gets the rest of that step and the steps
after it, nothing twice. A piece of the model's text, before its step is stored, has the id
``<sequence>.t<round>.<offset>``: the last step the client has, and how much of that round's text.
What the stream opens with (``RUN_STARTED``, the snapshots, a message or call reopened after a
cut) and how it ends carry no id.

No Django here: plain step dicts (``presenters.step_dict``) in, ``(id, event)`` pairs out.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..domain.replay import rebuild_state

Event = dict[str, Any]
Frame = tuple[str | None, Event]  # (SSE id, event)

NAMESPACE = uuid.UUID("0b8f3c5e-2d4a-4e0f-9c61-7a3e5b2f9d14")
CURSOR = re.compile(r"^(-?\d{1,18})\.(?:(\d{1,9})|t(\d{1,9})\.(\d{1,12}))$")
OPENERS = {
    "TEXT_MESSAGE_START": "TEXT_MESSAGE_END",
    "TOOL_CALL_START": "TOOL_CALL_END",
    "STEP_STARTED": "STEP_FINISHED",
}


def message_id(thread: Any, index: int) -> str:
    """The stable id of the ``index``-th message of a thread's transcript (snapshot and stream)."""
    return str(uuid.uuid5(NAMESPACE, f"{thread}:{index}"))


@dataclass(frozen=True)
class Cursor:
    """Where a client is: every event of the steps before ``sequence``, the first ``index + 1``
    events of step ``sequence`` (``index`` None: all of it), and ``offset`` characters of the
    text of ``round`` (a piece of text's id)."""

    sequence: int
    index: int | None = None
    round: int | None = None
    offset: int = 0

    @classmethod
    def parse(cls, value: str) -> Cursor | None:
        """The cursor an event id names, or None for anything else."""
        found = CURSOR.match(value.strip())
        if found is None:
            return None
        sequence, index, round_, offset = found.groups()
        if index is not None:
            return cls(int(sequence), int(index))
        return cls(int(sequence), None, int(round_), int(offset))

    @property
    def after(self) -> int:
        """The last step the client has whole."""
        return self.sequence - 1 if self.index is not None else self.sequence


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), default=str)


def snapshot_messages(messages: Iterable[Mapping[str, Any]], thread: Any) -> list[dict[str, Any]]:
    """Our transcript (OpenAI-shaped) as AG-UI messages, with their stable ids."""
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        role = str(message.get("role") or "user")
        mid = message_id(thread, i)
        if role == "tool":
            out.append({"id": mid, "role": "tool", "toolCallId": str(message.get("tool_call_id") or ""),
                        "content": _text(message.get("content"))})  # fmt: skip
        elif role == "assistant":
            item: dict[str, Any] = {"id": mid, "role": "assistant", "content": _text(message.get("content"))}
            calls = message.get("tool_calls") or []
            if calls:
                item["toolCalls"] = [_call(c) for c in calls]
            out.append(item)
        elif role in ("system", "developer", "user"):
            out.append({"id": mid, "role": role, "content": _text(message.get("content"))})
    return out


def _call(call: Mapping[str, Any]) -> dict[str, Any]:
    function = call.get("function") if isinstance(call.get("function"), Mapping) else None
    name = (function or {}).get("name", call.get("name"))
    arguments = (function or {}).get("arguments", call.get("arguments"))
    return {
        "id": str(call.get("id")),
        "type": "function",
        "function": {"name": str(name), "arguments": _text(arguments or {})},
    }


class Translator:
    """Follows one run's stream (after the steps ``seen``) and says what to send for each step,
    each piece of text, and its end. ``written`` is how much of a round's text the client has."""

    def __init__(self, thread: Any, seen: list[dict[str, Any]], written: dict[int, int] | None = None) -> None:
        self.thread = str(thread)
        self.steps = list(seen)
        self.count = len(rebuild_state(self.steps).messages)
        self.last = self.steps[-1]["sequence"] if self.steps else -1
        self.written: dict[int, int] = dict(written or {})
        self.open: dict[str, Event] = {}  # what a START opened and its END has not closed, by key
        self.held: list[Mapping[str, Any]] = []  # text read before its model call's step

    def messages(self) -> list[dict[str, Any]]:
        return snapshot_messages(rebuild_state(self.steps).messages, self.thread)

    # -- what opens and closes -------------------------------------------------------------

    @staticmethod
    def _key(event: Event) -> str:
        return str(event.get("messageId") or event.get("toolCallId") or event.get("stepName"))

    def _track(self, event: Event) -> None:
        kind = event["type"]
        if kind in OPENERS:
            self.open[f"{kind}:{self._key(event)}"] = event
        for opener, closer in OPENERS.items():
            if kind == closer:
                self.open.pop(f"{opener}:{self._key(event)}", None)

    def reopen(self) -> list[Frame]:
        """What a new stream must open again (no id) before it continues one a cut left open."""
        return [(None, dict(e)) for e in self.open.values()]

    def close_all(self) -> list[Frame]:
        """The ENDs of what is still open, last opened first (before the run's end)."""
        frames: list[Frame] = []
        for key, event in reversed(list(self.open.items())):
            closer = OPENERS[event["type"]]
            field = key.split(":", 1)[1]
            name = {"TEXT_MESSAGE_END": "messageId", "TOOL_CALL_END": "toolCallId", "STEP_FINISHED": "stepName"}[closer]
            frames.append((None, {"type": closer, name: field}))
        self.open.clear()
        return frames

    # -- steps ---------------------------------------------------------------------------

    def step(self, step: dict[str, Any], skip: int = 0) -> list[Frame]:
        """The events of a stored step, ids ``<sequence>.<i>``; the first ``skip`` are tracked
        but not sent (the client had them). The ids do not depend on the text the client got
        as it was written: that part is left out of the step's text, its index kept."""
        events = self._step_events(step)
        had = self.written.pop(int(step.get("round") or 0), 0) if step["kind"] == "llm" else 0
        self.steps.append(step)
        self.count = len(rebuild_state(self.steps).messages)
        self.last = step["sequence"]
        frames: list[Frame] = []
        for i, event in enumerate(events):
            if skip and i == skip:
                frames += self.reopen()  # what the part the client had left open
            if had and event["type"] == "TEXT_MESSAGE_START":
                continue  # opened by the first piece of text
            if had and event["type"] == "TEXT_MESSAGE_CONTENT":
                event = {**event, "delta": event["delta"][had:]}
                if not event["delta"]:
                    continue
            self._track(event)
            if i >= skip:
                frames.append((f"{step['sequence']}.{i}", event))
        if skip and skip >= len(events):
            frames += self.reopen()
        if step["kind"] == "request" and self.held:
            held, self.held = self.held, []
            for delta in held:
                frames += self.delta(delta)
        return frames

    def replay(self, steps: Iterable[dict[str, Any]]) -> None:
        """Follow steps the client has without sending them (what they leave open counts)."""
        for step in steps:
            self.step(step, skip=1 << 30)

    def _model_step(self, round_: int) -> str:
        return f"model {round_}"

    def _step_events(self, step: dict[str, Any]) -> list[Event]:
        kind, payload, round_ = step["kind"], step.get("payload") or {}, int(step.get("round") or 0)
        if kind == "request":
            return [{"type": "STEP_STARTED", "stepName": self._model_step(round_)}]
        if kind == "llm":
            return self._answer(payload, round_)
        if kind == "tool":
            return self._tool(payload)
        return []

    def _answer(self, payload: dict[str, Any], round_: int) -> list[Event]:
        events: list[Event] = []
        mid = message_id(self.thread, self.count)
        content = _text(payload.get("content"))
        if content:
            events.append({"type": "TEXT_MESSAGE_START", "messageId": mid, "role": "assistant"})
            events.append({"type": "TEXT_MESSAGE_CONTENT", "messageId": mid, "delta": content})
            events.append({"type": "TEXT_MESSAGE_END", "messageId": mid})
        if not payload.get("interrupted") and not payload.get("failed"):
            for call in payload.get("tool_calls") or []:
                shaped = _call(call)
                events.append({"type": "TOOL_CALL_START", "toolCallId": shaped["id"],
                               "toolCallName": shaped["function"]["name"], "parentMessageId": mid})  # fmt: skip
                events.append(
                    {"type": "TOOL_CALL_ARGS", "toolCallId": shaped["id"], "delta": shaped["function"]["arguments"]}
                )
                events.append({"type": "TOOL_CALL_END", "toolCallId": shaped["id"]})
        events.append({"type": "STEP_FINISHED", "stepName": self._model_step(round_)})
        return events

    def _tool(self, payload: dict[str, Any]) -> list[Event]:
        call_id = str(payload.get("call_id") or "")
        name = f"tool {payload.get('name') or payload.get('tool') or ''} {call_id}".replace("  ", " ")
        events: list[Event] = [{"type": "STEP_STARTED", "stepName": name}]
        if payload.get("interrupted"):
            content = "interrupted by a cancel"
        else:
            content = _text(payload.get("error") if payload.get("error") is not None else payload.get("result"))
        events.append({"type": "TOOL_CALL_RESULT", "messageId": message_id(self.thread, self.count),
                       "toolCallId": call_id, "content": content, "role": "tool"})  # fmt: skip
        events.append({"type": "STEP_FINISHED", "stepName": name})
        return events

    # -- the model's text as it is written ------------------------------------------------

    def delta(self, delta: Mapping[str, Any]) -> list[Frame]:
        """A piece of text, if it continues what the client has; a piece that starts past it
        (a stream that joined mid-answer) waits for its step, which carries the whole text."""
        round_, text = int(delta.get("round") or 0), str(delta.get("text") or "")
        if f"STEP_STARTED:{self._model_step(round_)}" not in self.open:
            self.held.append(delta)  # its model call's step is not read yet: after it
            return []
        offset = int(delta.get("offset") or 0)
        had = self.written.get(round_, 0)
        if offset > had or offset + len(text) <= had:
            return []
        piece = text[had - offset :]
        mid = message_id(self.thread, self.count)
        frames: list[Frame] = []
        if had == 0:
            start = {"type": "TEXT_MESSAGE_START", "messageId": mid, "role": "assistant"}
            self._track(start)
            frames.append((None, start))
        self.written[round_] = had + len(piece)
        frames.append(
            (
                f"{self.last}.t{round_}.{had + len(piece)}",
                {"type": "TEXT_MESSAGE_CONTENT", "messageId": mid, "delta": piece},
            )
        )
        return frames

    def written_start(self, round_: int) -> None:
        """A resumed stream whose client has part of ``round``'s text: its message is open."""
        if self.written.get(round_, 0) > 0:
            self._track(
                {"type": "TEXT_MESSAGE_START", "messageId": message_id(self.thread, self.count), "role": "assistant"}
            )
