"""Prometheus metrics of runs, steps, cancels, the reaper and the queue (``prometheus-client``).

Counters and histograms live in this module and are updated by ``observability.hooks``. Labels
are bounded: statuses, reasons, sources and kinds are enums; tool and provider names are the
registered ones (anything else is ``other``); models at most ``MODEL_LABELS_MAX`` distinct names.
Never a run id or a user.

With ``PROMETHEUS_MULTIPROC_DIR`` set, each process names its files after the first free *slot*
(an exclusive ``flock`` on ``slot<k>.lock``, released by the kernel when the process dies), not its
pid, so the files grow with the peak number of processes alive at once, not with RQ's one work
horse per job. The run-state gauges are read from the database at scrape time
(``collectors.RunStateCollector``). Why and how to set it up: docs/operations/metrics.md.
"""

from __future__ import annotations

import os
import re

from prometheus_client import Counter, Histogram, values

MULTIPROC_DIR = os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None
MODEL_LABELS_MAX = 50

_slot: dict[str, object] = {"pid": None, "id": None}


def _take_slot(directory: str) -> str:
    """The first ``slot<k>`` whose lock file no living process holds; locked until this process ends."""
    import fcntl

    k = 0
    while True:
        fd = os.open(os.path.join(directory, f"slot{k}.lock"), os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            k += 1
            continue
        return f"slot{k}"  # the descriptor stays open (and locked) for the life of the process


def _process_identifier() -> str:
    """This process's slot; a forked child (an RQ work horse) takes a slot of its own."""
    pid = os.getpid()
    if _slot["pid"] != pid:
        try:
            _slot["id"] = _take_slot(MULTIPROC_DIR or "")
        except (ImportError, OSError):  # no flock here: the library's default, one set of files per pid
            _slot["id"] = str(pid)
        _slot["pid"] = pid
    return str(_slot["id"])


if MULTIPROC_DIR:
    # prometheus_client leaves MultiProcessValue unannotated
    values.ValueClass = values.MultiProcessValue(process_identifier=_process_identifier)  # type: ignore[no-untyped-call]

_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900)
_WRITE_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5)

RUNS_STARTED = Counter("nrllm_runs_started", "Runs created, by how they execute and provider.", ["mode", "provider"])
RUNS_FINISHED = Counter("nrllm_runs_finished", "Runs that reached a terminal status.", ["status", "reason", "provider"])
RUNS_CANCELLED = Counter(
    "nrllm_runs_cancelled",
    "Runs cancelled, by cancel source, the status they had, provider.",
    ["source", "previous_status", "provider"],
)
RUNS_FAILED = Counter(
    "nrllm_runs_failed", "Runs that ended failed, by termination reason and provider.", ["reason", "provider"]
)
SEGMENTS = Counter(
    "nrllm_segments", "Segments (executions of a run by one process) by role and outcome.", ["role", "outcome"]
)
STEP_SECONDS = Histogram(
    "nrllm_step_duration_seconds", "Duration of model calls and tool executions.", ["kind", "tool"], buckets=_SECONDS
)
CANCEL_STOP_SECONDS = Histogram(
    "nrllm_cancel_stop_seconds",
    "From a cancel request to the executing segment's stop (queued and waiting "
    "runs stop at once and are not observed).",
    buckets=_SECONDS,
)
BOUNDARY_WRITE_SECONDS = Histogram(
    "nrllm_boundary_write_seconds",
    "One step boundary write (lease renewal, cancel probe, append).",
    buckets=_WRITE_SECONDS,
)
TOKENS = Counter(
    "nrllm_tokens", "Tokens spent, by provider, model and kind (prompt, completion).", ["provider", "model", "kind"]
)
SPEND = Counter(
    "nrllm_spend",
    "Money spent on model calls at the prices in force when they ran, by provider, model and currency "
    "(interrupted calls at their estimated tokens).",
    ["provider", "model", "currency"],
)
REAPER_ACTIONS = Counter(
    "nrllm_reaper_actions", "What the reaper did to runs whose lease expired.", ["action", "reason"]
)
CHILD_RUNS = Counter("nrllm_child_runs", "Child runs started by a sub-agent call (runtime.trees).")
CASCADED_CANCELS = Counter(
    "nrllm_cascaded_cancels", "Runs cancelled because a run above them in their tree was cancelled."
)
REAPER_PASSES = Counter("nrllm_reaper_passes", "Reaper passes (dry runs excluded).")
ENQUEUE_FAILURES = Counter("nrllm_enqueue_failures", "Runs the queue refused (settled failed, enqueue_failed).")
ENQUEUE_DEFERRED = Counter(
    "nrllm_enqueue_deferred", "Dispatches that met a queue outage (the run stays queued for the queued sweep)."
)
LEASE_LOSSES = Counter("nrllm_lease_losses", "Segments that found their run reaped or owned by another segment.")
RETRIES = Counter("nrllm_retries", "Runs handed back to the queue by their segment, by why.", ["kind"])

_LABEL = re.compile(r"^[\w.:/@+-]{1,64}$")
_models_seen: set[str] = set()


def bounded(value: str, allowed: set[str] | frozenset[str] | None = None) -> str:
    """A label value: itself when known (or well-formed, without a known set), else ``other``."""
    if allowed is not None:
        return value if value in allowed else "other"
    return value if value and _LABEL.match(value) else "other"


def model_label(model: str) -> str:
    """A model name as a label, bounded to ``MODEL_LABELS_MAX`` distinct names.

    In multiprocess mode the names are shared by every process of the directory (RQ forks a
    work horse per job: a count of its own would start from zero each time); without it, they
    are this process's.
    """
    model = model or "default"
    if model in _models_seen:
        return model
    if not _LABEL.match(model) or model in _models_refused:
        return "other"
    if MULTIPROC_DIR:
        try:
            admitted = _admit_shared(MULTIPROC_DIR, model)
        except (ImportError, OSError):  # no flock, or the directory is gone: this process's count
            admitted = len(_models_seen) < MODEL_LABELS_MAX
    else:
        admitted = len(_models_seen) < MODEL_LABELS_MAX
    (_models_seen if admitted else _models_refused).add(model)
    return model if admitted else "other"


_models_refused: set[str] = set()
MODEL_NAMES_FILE = "model-labels.txt"  # one admitted name per line; not a *.db file, so never scraped


def _admit_shared(directory: str, model: str) -> bool:
    """Whether ``model`` is (or now becomes) one of the directory's first ``MODEL_LABELS_MAX``
    names; read and appended under an exclusive ``flock``, so two processes cannot both take
    the last place."""
    import fcntl

    fd = os.open(os.path.join(directory, MODEL_NAMES_FILE), os.O_CREAT | os.O_RDWR | os.O_APPEND, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with os.fdopen(os.dup(fd), "r", encoding="utf-8") as f:
            f.seek(0)
            names = {line.rstrip("\n") for line in f}
        if model in names:
            return True
        if len(names) >= MODEL_LABELS_MAX:
            return False
        os.write(fd, (model + "\n").encode())
        return True
    finally:
        os.close(fd)  # closing drops the lock
