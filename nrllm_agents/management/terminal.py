"""What a command prints while it follows a run, and Ctrl-C as a cancel.

Output comes in two forms. Human lines (styled when the terminal allows), or, with
``--json``, one JSON object per line with an ``event`` key: first ``started``, then one
``step`` per recorded step (``presenters.step_dict`` shape), last the summary
(``presenters.summary_event``) — the shapes the browser stream uses too. Parsing the
arguments and the exit codes are ``console``'s.
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.core.management.base import CommandError, OutputWrapper
from django.core.management.color import Style
from django.db import connections
from django.utils import timezone

from ..live.watch import Watch
from ..models import AgentRun, CancelSource, RunStatus
from ..money import pricing
from ..presentation import describe, presenters
from ..presentation.outcomes import Outcome, RunResult, queued_wording
from ..runtime.agent_runtime import AgentRuntime
from ..store.db import release_connection
from .console import EXIT_INTERRUPTED, cancel_hint, command_line, exit_code, json_line, operator, terminal_safe

POLL_SECONDS = 0.2
ABANDON_CHECK_SECONDS = 10.0
# A cancelled run whose segment never acknowledged the stop (its process died) would keep a
# follower waiting forever; no single step can take longer than this (model and tool bounds).
ACK_GRACE = timedelta(seconds=120)


class StreamPrinter:
    """Prints a run's stream to a command's stdout: human lines, or JSON lines with ``--json``.

    Steps are printed once each, in order (a step whose sequence was already printed is
    skipped), and every line is flushed so pipes see it live.
    """

    def __init__(self, stdout: OutputWrapper, style: Style, *, as_json: bool) -> None:
        self.stdout, self.style, self.as_json = stdout, style, as_json
        self.run_id: str | None = None
        self.last_sequence = -1
        self._open_line = False  # live text is on the terminal's current line
        isatty = getattr(getattr(stdout, "_out", stdout), "isatty", None)
        self._terminal = bool(isatty and isatty())

    def _emit(self, obj: dict[str, Any] | None, text: str, style_func: Callable[[str], str] | None = None) -> None:
        if self._open_line:
            self.stdout.write("\r\033[K", ending="")  # the recorded step replaces the live text
            self._open_line = False
        if self.as_json:
            if obj is not None:
                self.stdout.write(json_line(obj), style_func=lambda s: s)
        else:
            self.stdout.write(terminal_safe(text), style_func=style_func)
        self.stdout.flush()

    def started(self, run_id: Any, note: str = "") -> None:
        """The first line: the run id."""
        self.run_id = str(run_id)
        self._emit({"event": "started", "run_id": self.run_id}, f"run {self.run_id}{note}", self.style.SUCCESS)

    def step(self, step: dict[str, Any]) -> None:
        """A recorded step (``presenters.step_dict`` shape); usable as ``on_step``."""
        if self.run_id is None:
            self.started(step["run_id"])
        if step["sequence"] <= self.last_sequence:
            return
        self.last_sequence = step["sequence"]
        self._emit({"event": "step", "step": step}, describe.headline(step))

    def delta(self, delta: dict[str, Any]) -> None:
        """A piece of the model's answer as it is written (never recorded); usable as ``on_delta``.

        ``--json`` prints an ``{"event": "delta", ...}`` line per piece. Human output on a
        terminal grows one line of text, erased when the recorded step replaces it; elsewhere
        (a pipe, a file) only recorded steps are printed.
        """
        if delta.get("kind") == "progress":
            self.progress(delta)
            return
        if self.as_json:
            self._emit({"event": "delta", **delta}, "")
            return
        if not self._terminal:
            return
        if delta.get("offset") == 0 or not self._open_line:
            self.stdout.write(f"  …    {'':<9} r{delta.get('round')}  ", ending="")
        self.stdout.write(terminal_safe(" ".join(str(delta.get("text") or "").splitlines())), ending="")
        self.stdout.flush()
        self._open_line = True

    def progress(self, report: dict[str, Any]) -> None:
        """A tool call's progress (never recorded): ``--json`` prints an ``{"event": "progress",
        ...}`` line; a terminal shows one line, rewritten by each report and erased when the
        recorded step replaces it; elsewhere nothing."""
        if self.as_json:
            self._emit({"event": "progress", **{k: v for k, v in report.items() if k != "kind"}}, "")
            return
        if not self._terminal:
            return
        if self._open_line:
            self.stdout.write("\r\033[K", ending="")
        line = f"  …    {'':<9} {report.get('name')}: {describe.progress_text([report])}"
        self.stdout.write(terminal_safe(line), ending="")
        self.stdout.flush()
        self._open_line = True

    def note(self, text: str, obj: dict[str, Any] | None = None) -> None:
        """An informational line (in JSON mode only when ``obj`` is given)."""
        self._emit(obj, text, self.style.NOTICE)

    def summary(self, run: AgentRun) -> int:
        """The last line, from a fresh row; returns the exit code the run's status maps to."""
        event = presenters.summary_event(run)
        self._emit(event, *self._human_summary(run, event))
        return exit_code(run.status)

    def _human_summary(self, run: AgentRun, event: dict[str, Any]) -> tuple[str, Callable[[str], str]]:
        head = f"run {run.pk}"
        tokens = event["usage"]["total_tokens"]
        cost = f", {pricing.cost_text(run)}" if run.cost is not None else ""
        calls = f"{run.iterations} model call{'' if run.iterations == 1 else 's'}"
        spend = f" [{calls}, {tokens} tokens{cost}]"
        if run.status == RunStatus.COMPLETED:
            why = "" if run.termination_reason == "completed" else f" ({run.termination_reason})"
            return f"{head} completed{why}{spend}: {describe.short(run.final_text or '', 300)}", self.style.SUCCESS
        if run.status == RunStatus.CANCELLED:
            c = event.get("cancel") or {}
            reason = f" ({c['reason']})" if c.get("reason") else ""
            why = "" if run.termination_reason == "cancelled" else f" [{run.termination_reason}]"
            return f"{head} cancelled{why} {describe.who_cancelled(c)}{reason}{spend}", self.style.WARNING
        if run.status == RunStatus.WAITING_FOR_APPROVAL:
            calls = "; ".join(map(describe.call_text, event["pending_approval"]))
            return (
                f"{head} is waiting for approval of {calls}; decide with: "
                f"{command_line('agent_approve', str(run.pk), '--approve')} (or --deny)"
            ), self.style.WARNING
        if run.status == RunStatus.FAILED:
            error = describe.short(event["error"] or "", 300)
            return f"{head} failed ({run.termination_reason}){spend}: {error}", self.style.ERROR
        return f"{head} is {run.status}", self.style.NOTICE


def follow(
    runtime: AgentRuntime,
    run_id: Any,
    *,
    after: int = -1,
    on_step: Callable[[dict[str, Any]], None],
    on_delta: Callable[[dict[str, Any]], None] | None = None,
    poll: float = POLL_SECONDS,
) -> AgentRun:
    """Tail a run's stored stream until nothing more will be appended; returns the last row read.

    Pushed on PostgreSQL (``watch.Watch``: no query while idle), else polled every ``poll``
    seconds; the model's words go to ``on_delta`` as they are written. A run cancelled more
    than ``ACK_GRACE`` ago whose stop was never acknowledged (its process died) also ends the
    tail, checked every ``ABANDON_CHECK_SECONDS`` of silence. Raises ``RunNotFound``.
    """
    run = runtime.status(run_id)
    watch = Watch(run.pk, after, poll=poll)
    quiet_since = time.monotonic() - (ABANDON_CHECK_SECONDS if _abandoned(run) else 0.0)
    try:
        while True:
            update = watch.update()
            for step in update.steps:
                on_step(step)
            if on_delta is not None:
                for delta in [*update.deltas, *update.progress]:
                    on_delta(delta)
            if update.finished:
                return runtime.status(run_id)
            if update.steps:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= ABANDON_CHECK_SECONDS:
                quiet_since = time.monotonic()
                if _abandoned(runtime.status(run_id)):
                    return runtime.status(run_id)
                if watch.pushed:
                    release_connection(idle=True)
            watch.wait(ABANDON_CHECK_SECONDS if watch.pushed else poll)
    finally:
        watch.close()


def _abandoned(run: AgentRun) -> bool:
    """Cancelled long ago and never acknowledged: the executing process is gone."""
    return (
        run.status == RunStatus.CANCELLED
        and run.stopped_at is None
        and run.cancel_requested_at is not None
        and timezone.now() - run.cancel_requested_at > ACK_GRACE
    )


class CancelOnInterrupt:
    """While active, Ctrl-C cancels the run (source ``cli``) instead of killing the process.

    The first SIGINT only wakes a helper thread, which cancels through the runtime on its own
    database connection (the handler itself does no database work: the main thread may be in
    the middle of a query). The step in flight is interrupted (a tool that ignores the cancel
    token runs to its boundary) and the command reports the run as cancelled. A second SIGINT
    exits at once (status 130) after giving the
    cancel a moment to commit. Installed only in the main thread; a no-op elsewhere.
    """

    REASON = "interrupted (Ctrl-C)"

    def __init__(self, runtime: AgentRuntime, stderr: OutputWrapper, run_id: Any = None) -> None:
        self.runtime, self.stderr = runtime, stderr
        self.run_id = run_id
        self._signals = itertools.count()
        self._interrupted = threading.Event()
        self._id_known = threading.Event()
        self._done = threading.Event()
        self._closing = False
        self._previous: Any = None
        self._installed = False
        self._thread = threading.Thread(target=self._cancel_when_interrupted, name="nrllm-cli-interrupt", daemon=True)
        if run_id is not None:
            self._id_known.set()

    def set_run_id(self, run_id: Any) -> None:
        """Tell which run to cancel (for ``agent_run``, known once its first step is recorded)."""
        if self.run_id is None:
            self.run_id = run_id
            self._id_known.set()

    def __enter__(self) -> CancelOnInterrupt:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
            # The helper inherits a mask that blocks SIGINT, so the kernel delivers it to the
            # main thread: a signal landing on the helper would not interrupt the main thread's
            # blocking sleep, and the handler would only run once that step finished.
            if not hasattr(signal, "pthread_sigmask"):  # Windows: signals only reach the main thread
                self._thread.start()
                return self
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                self._thread.start()
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self._installed:
            return
        signal.signal(signal.SIGINT, self._previous)
        self._closing = True
        self._interrupted.set()
        self._id_known.set()
        self._thread.join(timeout=30)

    def _handle(self, signum: int, frame: Any) -> None:
        # Handlers can nest (a second SIGINT may run this before the first call returns), so
        # "is this the first?" is decided by one C call that no nested call can split.
        if next(self._signals):
            os.write(2, b"\ninterrupted again: exiting now, without waiting for the step in flight\n")
            self._done.wait(timeout=5)  # let the cancel already asked for commit
            os._exit(EXIT_INTERRUPTED)
        self._interrupted.set()
        os.write(2, b"\ninterrupted: cancelling the run and the step in flight (press Ctrl-C again to exit now)\n")

    def _cancel_when_interrupted(self) -> None:
        try:
            self._interrupted.wait()
            if self._closing:
                return
            self._id_known.wait()
            if self._closing and self.run_id is None:
                return
            result = self.runtime.cancel(self.run_id, by=operator(), source=CancelSource.CLI, reason=self.REASON)
            if result.outcome != "cancelled":
                self.stderr.write(f"run {self.run_id}: not cancelled ({result.outcome.replace('_', ' ')})")
        except Exception as exc:  # a failed cancel is reported, never raised into the run
            self.stderr.write(f"could not cancel run {self.run_id}: {type(exc).__name__}: {exc}")
        finally:
            self._done.set()
            connections.close_all()  # this thread's connections only


def stderr_hint(stderr: OutputWrapper, run_id: Any) -> None:
    """Tell, on stderr, the command that would cancel the run."""
    stderr.write(f"to cancel it: {cancel_hint(run_id)}", style_func=lambda s: s)
    stderr.flush()


def waiting_for_queue(stderr: OutputWrapper, result: RunResult) -> None:
    """Say on stderr when a run handed to the workers found the queue unreachable: it is stored
    and starts once the queue is back (the command still succeeds)."""
    if result.outcome == Outcome.WAITING_FOR_QUEUE:
        stderr.write(queued_wording(result.outcome).sentence(result.run_id))


def interrupted_follow(run_id: Any) -> CommandError:
    """Ctrl-C while following: the run is left alone; say so."""
    return CommandError(
        f"stopped following run {run_id}; it goes on (cancel it with {cancel_hint(run_id)})",
        returncode=EXIT_INTERRUPTED,
    )
