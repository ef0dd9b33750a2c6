"""What the ``agent_*`` management commands share on the way in: parsing arguments (owners,
run ids, limits, scripts, durations), user errors, and exit codes.

What they print while following a run, and Ctrl-C as a cancel, is ``terminal``'s.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import shlex
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core import checks
from django.core.management.base import CommandError
from django.utils import timezone

from ..domain import jsonlimits
from ..models import AgentRun, RunStatus
from ..runtime.agent_runtime import InvalidRunId, parse_run_id
from ..store import Operator
from ..validation.run_request import InvalidRequest

# Exit codes shared by agent_run, agent_approve and the followers.
EXIT_OK = 0  # completed (an approval denial that ended the run included)
EXIT_FAILED = 1  # the run failed, or the command could not do what was asked
EXIT_USAGE = 2  # malformed input: nothing was done
EXIT_CANCELLED = 3  # the run was cancelled
EXIT_AWAITING_APPROVAL = 4  # the run is waiting for a human decision
EXIT_INTERRUPTED = 130  # a second Ctrl-C: left without waiting for the step in flight

_EXIT_BY_STATUS: dict[str, int] = {  # keyed by RunStatus, asked with a run's stored status
    RunStatus.COMPLETED: EXIT_OK,
    RunStatus.CANCELLED: EXIT_CANCELLED,
    RunStatus.WAITING_FOR_APPROVAL: EXIT_AWAITING_APPROVAL,
    RunStatus.FAILED: EXIT_FAILED,
}


def command_line(*args: str) -> str:
    """A ``manage.py`` command line the user can paste into another terminal as it is, from any
    folder: this interpreter and this ``manage.py`` by absolute path (``/…/.venv/bin/python``
    under ``make``), and the development switch when this process runs in development mode
    without a key of its own."""
    parts = [
        str(path.absolute())
        for path in (Path(sys.executable), Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None)
        if path is not None
    ]
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


def checks_without_web() -> list[str]:
    """The system-check tags for a command that serves no web request: this app's, and Django's
    but ``urls``, ``templates``, ``admin``, ``compatibility`` and ``database`` (left out by
    default, as Django does).

    Each web check imports what a short command does not use, and most of its start (issue 46):
    the URLconf check imports the REST API and its schema views, the template and admin checks
    every template-tag library (DRF's imports its renderers), and DRF's one ``compatibility`` check its
    paginator; all three bring in the REST serializers."""
    web = {checks.Tags.urls, checks.Tags.templates, checks.Tags.admin, checks.Tags.compatibility, checks.Tags.database}
    # this app's own checks carry its label as a tag (checks.TAG; the app floor sits above this one)
    return sorted(checks.registry.registry.tags_available() - web | {"nrllm_agents"})


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


RUN_ID_PREFIX_MIN = 8  # the short id the playground and the admin show
_PREFIX = re.compile(r"[0-9a-f]{8}(-?[0-9a-f]){0,24}-?")


def run_id_arg(value: str) -> Any:
    """A run id from the command line: a whole UUID, or a unique prefix of at least 8 hex
    digits (the short id the UI shows). Raises a usage error (exit 2) for anything else, and
    for a prefix two runs share (naming them); a prefix no run has is exit 1, as an unknown run."""
    try:
        return parse_run_id(value)
    except InvalidRunId as exc:
        text = str(value).strip().lower()
        if not _PREFIX.fullmatch(text):
            raise usage_error(str(exc)) from None
    hexes = text.replace("-", "")
    hyphenated = "-".join(p for p in (hexes[:8], hexes[8:12], hexes[12:16], hexes[16:20], hexes[20:]) if p)
    found = AgentRun.objects.filter(id__startswith=hyphenated).order_by("created_at")  # a read: no status written
    matches = list(found.values_list("id", flat=True)[:6])
    if len(matches) > 1:
        shown = ", ".join(str(m) for m in matches[:5]) + (", …" if len(matches) > 5 else "")
        raise usage_error(f"run id prefix {text!r} is ambiguous: {shown}")
    if not matches:
        raise CommandError(f"no run id starts with {text!r}", returncode=EXIT_FAILED)
    return matches[0]


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


__all__ = [
    "EXIT_AWAITING_APPROVAL",
    "EXIT_CANCELLED",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "in_range",
    "enqueue_failed",
    "exit_code",
    "parse_duration",
    "parse_script",
    "request_error",
    "run_id_arg",
    "terminal_safe",
    "usage_error",
]
