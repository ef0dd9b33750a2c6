"""What the ``agent_*`` management commands share: parsing, the step printer, following a
stored stream, exit codes, and turning Ctrl-C into a cancel.

Output comes in two forms. Human lines (styled when the terminal allows), or, with
``--json``, one JSON object per line with an ``event`` key: first ``started``, then one
``step`` per recorded step (``presenters.step_dict`` shape), last the summary
(``presenters.summary_event``) — the shapes the browser stream uses too.
"""

from __future__ import annotations

import getpass
import itertools
import json
import os
import re
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError, OutputWrapper
from django.core.management.color import Style
from django.db import connections
from django.utils import timezone

from ..domain import jsonlimits
from ..live.watch import Watch
from ..models import AgentRun, CancelSource, RunStatus
from ..runtime.agent_runtime import AgentRuntime, InvalidRunId, parse_run_id
from ..store import Operator
from ..store.db import release_connection
from ..vocabulary import describe, presenters, pricing
from ..vocabulary.outcomes import Outcome, RunResult, queued_wording
from ..vocabulary.run_request import InvalidRequest

# Exit codes shared by agent_run, agent_approve and the followers.
EXIT_OK = 0  # completed (an approval denial that ended the run included)
EXIT_FAILED = 1  # the run failed, or the command could not do what was asked
EXIT_USAGE = 2  # malformed input: nothing was done
EXIT_CANCELLED = 3  # the run was cancelled
EXIT_AWAITING_APPROVAL = 4  # the run is waiting for a human decision
EXIT_INTERRUPTED = 130  # a second Ctrl-C: left without waiting for the step in flight

_EXIT_BY_STATUS = {
    RunStatus.COMPLETED: EXIT_OK,
    RunStatus.CANCELLED: EXIT_CANCELLED,
    RunStatus.WAITING_FOR_APPROVAL: EXIT_AWAITING_APPROVAL,
    RunStatus.FAILED: EXIT_FAILED,
}

POLL_SECONDS = 0.2
ABANDON_CHECK_SECONDS = 10.0
# A cancelled run whose segment never acknowledged the stop (its process died) would keep a
# follower waiting forever; no single step can take longer than this (model and tool bounds).
ACK_GRACE = timedelta(seconds=120)


def command_line(*args: str) -> str:
    """A ``manage.py`` command line the user can paste into another terminal as it is: this
    interpreter (``.venv/bin/python`` under ``make``), this ``manage.py``, and the development
    switch when this process runs in development mode without a key of its own."""
    here = Path.cwd()
    parts = []
    for path in (Path(sys.executable), Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None):
        if path is None:
            continue
        try:
            parts.append(str(path.absolute().relative_to(here)))
        except ValueError:
            parts.append(str(path.absolute()))
    if len(parts) < 2 or not parts[1].endswith("manage.py"):
        parts = [parts[0], "manage.py"]
    env = "DJANGO_DEBUG=1 " if os.environ.get("DJANGO_DEBUG") == "1" and not os.environ.get("DJANGO_SECRET_KEY") else ""
    return env + " ".join(shlex.quote(p) for p in [*parts, *args])


def cancel_hint(run_id: Any) -> str:
    return command_line("agent_cancel", str(run_id))


# RunRequest field -> the flag that sets it, so a usage error names what the user typed.
_FLAGS = {
    "prompt": "PROMPT",
    "provider": "--provider",
    "model": "--model",
    "tools": "--tool",
    "max_iterations": "--max-iterations",
    "script": "--script",
    "deadline_seconds": "--deadline-seconds",
    "max_total_tokens": "--max-total-tokens",
    "max_cost": "--max-cost",
    "connection": "--connection",
    "agent": "--agent",
    "from_sequence": "--from",
}


# C0 controls but tab and newline, DEL, and the C1 controls (0x9b is CSI on some terminals).
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_C1 = re.compile(r"[\x7f-\x9f]")


def terminal_safe(text: str) -> str:
    """``text`` with every terminal control character shown as an escape (``\\x1b``), so what a
    model, a tool or an operator wrote can neither move the cursor, clear the screen, rewrite a
    line nor reach the clipboard (OSC 52) of whoever reads the output."""
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def json_line(obj: Any) -> str:
    """One JSON line; ``json`` escapes C0 controls itself, the C1 ones are escaped here."""
    return _C1.sub(lambda m: f"\\u{ord(m.group()):04x}", json.dumps(obj, default=str, ensure_ascii=False))


# The flags agent_run and agent_fork share, by RunRequest field (the script is parsed apart).
REQUEST_OPTIONS = (
    "provider",
    "model",
    "tools",
    "max_iterations",
    "deadline_seconds",
    "max_total_tokens",
    "max_cost",
    "connection",
    "agent",
)


def request_options(options: dict[str, Any]) -> dict[str, Any]:
    """The request fields a command's flags set (those given), keyed by ``RunRequest`` field."""
    return {key: options[key] for key in REQUEST_OPTIONS if options.get(key) is not None}


def exit_code(status: str) -> int:
    """The exit code for a run's status: 0 completed, 3 cancelled, 4 waiting, 1 otherwise."""
    return _EXIT_BY_STATUS.get(status, EXIT_FAILED)


def usage_error(message: str) -> CommandError:
    """A one-line usage error (exit 2)."""
    return CommandError(terminal_safe(" ".join(message.splitlines())), returncode=EXIT_USAGE)


def in_range(flag: str, value: int | None, low: int, high: int) -> int | None:
    """``value`` when it lies from ``low`` to ``high`` (or is None); else a usage error (exit 2)
    naming the flag and the range, before any query sees the number."""
    if value is not None and not low <= value <= high:
        raise usage_error(f"{flag} must be a whole number from {low} to {high:,}")
    return value


def operator(name: str | None = None) -> Any:
    """Who acts from this shell: the site user named ``name`` when there is one, else an
    ``Operator`` of that name. Without a name: the OS user (``SUDO_USER`` first, so ``sudo``
    does not hide who it was), so a cancel from the terminal never reads "an unknown user"."""
    if name is None:
        name = os.environ.get("SUDO_USER") or _os_user()
    name = terminal_safe(name.strip())[:150]
    if not name:
        raise usage_error("--by: a name, e.g. --by alice")
    return _user(name) or Operator(name)


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry for this uid (containers)
        return f"uid {os.getuid()}"


def _user(username: str) -> Any:
    model = get_user_model()
    return model._default_manager.filter(**{model.USERNAME_FIELD: username}).first()


def owner_arg(username: str | None) -> Any:
    """``--owner USERNAME``: the site user who will own the run (it then shows in their
    playground and API); a name that is no user is a usage error."""
    if username is None:
        return None
    user = _user(username)
    if user is None:
        raise usage_error(f"--owner: no user named {terminal_safe(username[:150])!r}")
    return user


def add_owner_argument(parser: Any) -> None:
    parser.add_argument(
        "--owner",
        metavar="USERNAME",
        help="The site user who owns the run: it shows in their playground and API (default: no owner, "
        "visible to staff only).",
    )


def run_id_arg(value: str) -> Any:
    """A run id from the command line, or a usage error."""
    try:
        return parse_run_id(value)
    except InvalidRunId as exc:
        raise usage_error(str(exc)) from None


def request_error(exc: InvalidRequest) -> CommandError:
    """An ``InvalidRequest`` as one line naming the flags at fault (exit 2)."""
    parts = [f"{_FLAGS.get(field, field)}: {message}" for field, message in exc.errors.items()]
    return usage_error("invalid request: " + "; ".join(parts).replace("\n", " "))


def enqueue_failed(exc: Exception) -> CommandError:
    """The queue refused the job (exit 1); the runtime already marked the run failed."""
    return CommandError(f"{exc}; the run was marked failed (enqueue_failed)", returncode=EXIT_FAILED)


def add_limit_arguments(parser: Any) -> None:
    """``--deadline-seconds`` and ``--max-total-tokens`` (defaults and bounds from settings)."""
    parser.add_argument(
        "--deadline-seconds",
        type=int,
        metavar="S",
        help="Cancel the run (deadline_exceeded) once it has taken S seconds, approval waits "
        "excluded (default: NRLLM_AGENTS['DEFAULT_DEADLINE_SECONDS'], none).",
    )
    parser.add_argument(
        "--max-total-tokens",
        type=int,
        metavar="N",
        help="Cancel the run (budget_exceeded) after the model call that takes its spend "
        "above N tokens (default: NRLLM_AGENTS['DEFAULT_MAX_TOTAL_TOKENS'], none).",
    )
    parser.add_argument(
        "--max-cost",
        metavar="AMOUNT",
        help="Cancel the run (cost_exceeded) after the model call that takes its cost above AMOUNT, "
        "in NRLLM_AGENTS['CURRENCY'] (default: NRLLM_AGENTS['DEFAULT_MAX_COST'], none).",
    )


def parse_script(value: str) -> Any:
    """``--script``: inline JSON, or ``@path`` to a file holding it. Structure is checked later
    by ``RunRequest``; this only turns text into JSON, with a one-line error naming the flag."""
    text = value
    if value.startswith("@"):
        try:
            text = Path(value[1:]).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise usage_error(f"--script: cannot read {value[1:]!r}: {exc.__class__.__name__}") from None
    try:
        return jsonlimits.loads(text)
    except jsonlimits.JSONRefused as exc:
        raise usage_error(f"--script: {exc}") from None


_DURATION = re.compile(r"^\s*(\d{1,9})\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_duration(value: str, flag: str = "--older-than") -> timedelta:
    """``30s``, ``15m``, ``2h``, ``7d``, ``1w`` -> a timedelta; anything else is a usage error
    naming ``flag``."""
    match = _DURATION.match(value or "")
    if not match:
        raise usage_error(f"{flag}: expected a duration like 30s, 15m, 2h or 7d, got {value[:40]!r}")
    try:
        return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})
    except OverflowError:
        raise usage_error(f"{flag}: {value!r} is too long ago") from None


def created_before(value: str) -> Any:
    """``--older-than`` as the moment runs must have been created before; a usage error when
    that moment is before the first representable date (``999999d``)."""
    age = parse_duration(value)
    try:
        return timezone.now() - age
    except OverflowError:
        raise usage_error(f"--older-than: {value.strip()!r} is too long ago") from None


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
            for delta in update.deltas if on_delta is not None else ():
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


__all__ = [
    "EXIT_AWAITING_APPROVAL",
    "EXIT_CANCELLED",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "in_range",
    "CancelOnInterrupt",
    "StreamPrinter",
    "enqueue_failed",
    "exit_code",
    "follow",
    "interrupted_follow",
    "parse_duration",
    "parse_script",
    "request_error",
    "run_id_arg",
    "stderr_hint",
    "terminal_safe",
    "usage_error",
]
