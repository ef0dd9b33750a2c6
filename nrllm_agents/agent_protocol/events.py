"""A run's steps and deltas as the protocol's stream parts, for the modes a client asked for.

- ``values``: the thread's ``{"messages": [...]}`` after each step that adds a message, and at
  the end (with ``__interrupt__`` while a run waits for approval);
- ``updates``: what each node added (``agent``: the model's turn, ``tools``: a tool's answer),
  and ``{"__interrupt__": [...]}``;
- ``messages-tuple`` (event ``messages``): ``[chunk, metadata]`` as the model writes, the rest
  of the turn (and its tool calls) once it is recorded, then each tool message;
- ``messages``: ``messages/metadata``, ``messages/partial`` and ``messages/complete``;
- ``events``: ``on_chat_model_stream`` / ``on_chat_model_end`` / ``on_tool_end`` /
  ``on_chain_end``;
- ``tasks``: a task result per node update (``agent``: the model's turn, ``tools``: a tool's
  answer), ``[["messages", [message]]]`` its result;
- ``checkpoints``: the thread's state after each step that adds a message (its checkpoint id is
  the one ``threads.get_state`` names: the run and its step count);
- ``debug``: both, as LangGraph wraps them (``{"type": "task_result" | "checkpoint", ...}``);
- ``custom``, ``tools``, ``lifecycle``: nothing (no custom writes, tool events or subgraphs here).

No Django here beyond the rows handed in: plain step dicts (``presenters.step_dict``) in,
``(event, data)`` pairs out.
"""

from __future__ import annotations

from typing import Any

from ..domain.replay import rebuild_state
from . import messages as m
from .state import NODE, TOOLS_NODE

Part = tuple[str, Any]


class Translator:
    """Follows one run's stream and says what to send for each step, delta and its end."""

    def __init__(self, run_id: Any, thread_id: Any, modes: tuple[str, ...], seen: list[dict[str, Any]]) -> None:
        self.run_id, self.thread_id, self.modes = str(run_id), str(thread_id), modes
        self.steps = list(seen)
        self.count = len(rebuild_state(self.steps).messages)
        self.written: dict[int, str] = {}  # round -> the text streamed so far
        self.msg_ids: dict[int, str] = {}  # round -> the id of the message it writes

    def _meta(self, round_: int, node: str = NODE) -> dict[str, Any]:
        return {
            "langgraph_node": node,
            "langgraph_step": round_,
            "run_id": self.run_id,
            "thread_id": self.thread_id,
        }

    def _messages(self) -> list[dict[str, Any]]:
        return m.transcript(rebuild_state(self.steps).messages, self.thread_id)

    def _id(self, round_: int) -> str:
        return self.msg_ids.setdefault(round_, m.message_id(self.thread_id, self.count))

    def _event(self, name: str, data: dict[str, Any], round_: int, node: str = NODE) -> Part:
        return "events", {
            "event": name,
            "name": node,
            "run_id": self.run_id,
            "data": data,
            "metadata": self._meta(round_, node),
            "tags": [],
            "parent_ids": [],
        }

    def delta(self, delta: dict[str, Any]) -> list[Part]:
        """A piece of the model's answer as it is written."""
        round_, text = int(delta.get("round") or 0), str(delta.get("text") or "")
        before = self.written.get(round_, "")
        offset = int(delta.get("offset") or 0)
        text = text[max(0, len(before) - offset) :]
        if not text:
            return []
        self.written[round_] = before + text
        first = not before
        msg_id = self._id(round_)
        chunk = m.ai_message(text, msg_id, chunk=True)
        parts: list[Part] = []
        if "messages-tuple" in self.modes:
            parts.append(("messages", [chunk, self._meta(round_)]))
        if "messages" in self.modes:
            if first:
                parts.append(("messages/metadata", {msg_id: {"metadata": self._meta(round_)}}))
            parts.append(("messages/partial", [m.ai_message(self.written[round_], msg_id)]))
        if "events" in self.modes:
            parts.append(self._event("on_chat_model_stream", {"chunk": chunk}, round_))
        return parts

    def step(self, step: dict[str, Any]) -> list[Part]:
        """What a recorded step adds to the stream."""
        self.steps.append(step)
        kind, payload, round_ = step["kind"], step.get("payload") or {}, int(step.get("round") or 0)
        messages = self._messages()
        added, self.count = messages[self.count :], len(messages)
        parts: list[Part] = []
        if kind == "llm" and not payload.get("interrupted") and not payload.get("failed"):
            parts += self._answer(payload, round_, added)
        elif kind == "tool":
            for message in added:
                parts += self._tool(message, round_)
        if added and "values" in self.modes:
            parts.append(("values", {"messages": messages}))
        if added:
            parts += self._checkpoint(messages, step)
        return parts

    def _debug(self, kind: str, payload: dict[str, Any], step: dict[str, Any]) -> Part:
        when: Any = step.get("created_at")
        stamp = when.isoformat() if hasattr(when, "isoformat") else when
        return "debug", {"type": kind, "timestamp": stamp, "step": int(step.get("round") or 0), "payload": payload}

    def _checkpoint(self, messages: list[dict[str, Any]], step: dict[str, Any]) -> list[Part]:
        """The thread's state after ``step``, for ``checkpoints`` and ``debug``."""
        if "checkpoints" not in self.modes and "debug" not in self.modes:
            return []
        config = {"thread_id": self.thread_id, "checkpoint_ns": "", "checkpoint_id": f"{self.run_id}.{len(self.steps)}"}
        checkpoint: dict[str, Any] = {
            "config": {"configurable": config},
            "parent_config": None,
            "values": {"messages": messages},
            "metadata": {"source": "loop", "step": int(step.get("round") or 0), "run_id": self.run_id},
            "next": [],
            "tasks": [],
        }
        parts: list[Part] = []
        if "checkpoints" in self.modes:
            parts.append(("checkpoints", checkpoint))
        if "debug" in self.modes:
            parts.append(self._debug("checkpoint", checkpoint, step))
        return parts

    def _task(self, node: str, message: dict[str, Any]) -> list[Part]:
        """A node's update as a finished task, for ``tasks`` and ``debug``."""
        if "tasks" not in self.modes and "debug" not in self.modes:
            return []
        step = self.steps[-1] if self.steps else {}
        result = {
            "id": f"{self.run_id}.{len(self.steps)}.{node}",
            "name": node,
            "error": None,
            "result": [["messages", [message]]],
            "interrupts": [],
        }
        parts: list[Part] = []
        if "tasks" in self.modes:
            parts.append(("tasks", result))
        if "debug" in self.modes:
            parts.append(self._debug("task_result", result, step))
        return parts

    def _answer(self, payload: dict[str, Any], round_: int, added: list[dict[str, Any]]) -> list[Part]:
        content = str(payload.get("content") or "")
        msg_id = added[0]["id"] if added else self._id(round_)
        self.msg_ids[round_] = msg_id
        calls = payload.get("tool_calls") or []
        message = m.ai_message(content, msg_id, calls)
        rest = content[len(self.written.get(round_, "")) :]
        # What the deltas did not carry (the tail, the tool calls): the chunks add up to the turn.
        tail = m.ai_message(rest, msg_id, calls, chunk=True) if rest or calls else None
        parts: list[Part] = []
        if "messages-tuple" in self.modes and tail is not None:
            parts.append(("messages", [tail, self._meta(round_)]))
        if "messages" in self.modes:
            if round_ not in self.written:
                parts.append(("messages/metadata", {msg_id: {"metadata": self._meta(round_)}}))
            parts.append(("messages/complete", [message]))
        if "updates" in self.modes:
            parts.append(("updates", {NODE: {"messages": [message]}}))
        parts += self._task(NODE, message)
        if "events" in self.modes:
            if tail is not None:
                parts.append(self._event("on_chat_model_stream", {"chunk": tail}, round_))
            parts.append(self._event("on_chat_model_end", {"output": message}, round_))
        return parts

    def _tool(self, message: dict[str, Any], round_: int) -> list[Part]:
        parts: list[Part] = []
        if "messages-tuple" in self.modes:
            parts.append(("messages", [message, self._meta(round_, TOOLS_NODE)]))
        if "messages" in self.modes:
            parts.append(("messages/complete", [message]))
        if "updates" in self.modes:
            parts.append(("updates", {TOOLS_NODE: {"messages": [message]}}))
        parts += self._task(TOOLS_NODE, message)
        if "events" in self.modes:
            parts.append(self._event("on_tool_end", {"output": message}, round_, TOOLS_NODE))
        return parts

    def end(self, values: dict[str, Any], interrupts: list[dict[str, Any]], error: dict[str, Any] | None) -> list[Part]:
        """The last parts: the final values (and the interrupt), or the run's error."""
        parts: list[Part] = []
        if "values" in self.modes:
            parts.append(("values", {**values, **({"__interrupt__": interrupts} if interrupts else {})}))
        if interrupts and "updates" in self.modes:
            parts.append(("updates", {"__interrupt__": interrupts}))
        if "events" in self.modes:
            parts.append(self._event("on_chain_end", {"output": values}, 0, "LangGraph"))
        if error is not None:
            parts.append(("error", error))
        return parts
