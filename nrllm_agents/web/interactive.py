"""Interactive segments for the playground: executed in a background thread of the web process.

The page that started a run must be able to stream it, so the request returns as soon as
the run exists and the segment (``AgentRuntime.run`` or ``approve``) goes on in a daemon
thread that closes its own database connections. Like the in-process executor, such a run
does not survive the web process.

At most ``INTERACTIVE_WORKERS`` segments execute at once in one process (each holds a
thread and a database connection), and at most ``INTERACTIVE_MAX_PER_USER`` of one user
(``admission.slots``, kind ``INTERACTIVE``); beyond that ``launch`` raises ``AtCapacity`` at
once, and the playground says so (queued runs have no such bound: workers take them in turn).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

from django.db import connections

from .. import admission
from ..domain.errors import Kind, KindedError
from ..executors.inflight import InFlight
from ..runtime.agent_runtime import RunResult
from ..runtime.segment import StepObserver

logger = logging.getLogger(__name__)

Segment = Callable[[StepObserver], RunResult]

_in_flight = InFlight()  # background segments started and not yet finished


class AtCapacity(KindedError, RuntimeError):
    """Every interactive slot of this process, or of this user, is taken; nothing was started."""

    kind = Kind.UNAVAILABLE

    def __init__(self, refused: admission.SlotRefused) -> None:
        super().__init__(refused.detail)


class LaunchTimeout(KindedError, RuntimeError):
    """The segment neither recorded a step nor returned in time; it goes on in the background."""

    kind = Kind.UNAVAILABLE

    def __init__(self, timeout: float) -> None:
        super().__init__(f"the run did not start within {timeout:g} s")


def launch(segment: Segment, *, user_key: Any, timeout: float = 30.0) -> uuid.UUID:
    """Start ``segment(on_step)`` in a background thread; return its run id once known.

    The id is known at the segment's first step (the observer is called with it) or when the
    segment returns, whichever comes first. An exception raised before either (a bad request,
    ``ApprovalNotPending``, ``RunNotFound``) is re-raised here, in the caller's thread.
    Raises ``LaunchTimeout`` when neither happens within ``timeout`` seconds, and
    ``AtCapacity`` (starting nothing) when every interactive slot of the process, or of
    ``user_key`` (the user's pk), is taken.
    """
    slot = admission.hold(admission.Kind.INTERACTIVE, user_key)
    if isinstance(slot, admission.SlotRefused):
        raise AtCapacity(slot)
    known = threading.Event()
    box: dict[str, Any] = {}

    def observe(step: dict[str, Any]) -> None:
        box.setdefault("run_id", step["run_id"])
        known.set()

    def target() -> None:
        try:
            result = segment(observe)
            box.setdefault("run_id", str(result.run_id))
        except BaseException as exc:  # reported to the caller if it is still waiting
            box["error"] = exc
            if "run_id" in box:
                logger.exception("interactive segment of run %s failed", box["run_id"])
        finally:
            known.set()
            connections.close_all()  # this thread's connections only; they are thread-local
            slot.release()
            _in_flight.finished()

    _in_flight.started()
    try:
        threading.Thread(target=target, name="nrllm-interactive", daemon=True).start()
    except BaseException:
        slot.release()
        _in_flight.finished()
        raise
    if not known.wait(timeout):
        raise LaunchTimeout(timeout)
    if "run_id" not in box:
        raise box["error"]
    return uuid.UUID(str(box["run_id"]))


def wait_idle(timeout: float = 30.0) -> bool:
    """Wait until no interactive segment is executing (tests, shutdown)."""
    return _in_flight.wait_idle(timeout)
