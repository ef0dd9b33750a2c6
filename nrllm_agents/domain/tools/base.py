"""The tool protocol."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Tool(Protocol):
    """A callable capability the model may invoke.

    ``execute`` returns a JSON-serialisable value. It raises ``ToolError`` for input the
    model should correct (fed back as the tool result) and anything else for a failure
    that ends the run with ``tool_failed``.
    """

    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments object
    requires_approval: bool
    # Optional ``idempotent: bool`` (default True). A tool with a side effect that must not
    # happen twice sets it False: the runtime stamps a write fence before it starts, and a
    # run lost while that stamp stands is never retried.
    # Optional ``transactional: bool`` (default False). A tool whose effect is writes to the
    # run's database (the Django ORM, on the default database) sets it True: the call runs inside
    # the transaction that records its ``tool`` step, so its writes and its step commit together
    # through the step's fence, or neither does (a lost worker, a cancel, a lost lease, an
    # error roll them back). It needs no write fence and is never in doubt. With database
    # routers, it names the models it writes (``models``, classes or ``"app_label.Model"``):
    # ``manage.py check`` refuses one that writes to another database than its runs' (E024).
    # Optional ``instant: bool`` (default False). A tool that returns at once, waiting on
    # nothing (no I/O, no sleep, no lock; microseconds of CPU, as the calculator), sets it True:
    # the runtime then keeps its database connection across the call rather than giving it
    # back to the pool and taking one again for the step that follows.

    def execute(self, arguments: dict[str, Any]) -> Any: ...

    # A tool may also take a keyword ``context`` (``CallContext``) to be interrupted by a cancel
    # (``context.token``); one that does not runs to its step boundary.


class SubAgent(Protocol):
    """A tool whose call is answered by another run (a sub-agent's): the loop never executes it.

    A turn that calls one suspends the loop (``AWAITING_CHILDREN``) while ``awaits(call, turn)``
    (``turn``: every call of that model turn) says the call's run has not ended; once none
    does, ``answer`` gives each call's result (its run's final answer) or raises ``ToolError``
    (the run failed, was cancelled, or never started).
    Marked by ``spawns_run = True``.
    """

    name: str
    spawns_run: bool

    def awaits(self, call: Any, turn: Any) -> bool: ...

    def answer(self, call: Any, turn: Any) -> Any: ...


def is_sub_agent(tool: Any) -> bool:
    """Whether ``tool`` is answered by a sub-agent's run (``SubAgent``)."""
    return bool(getattr(tool, "spawns_run", False))


def schema(tool: Tool) -> dict[str, Any]:
    """The chat-completions ``tools`` entry for a tool."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }
