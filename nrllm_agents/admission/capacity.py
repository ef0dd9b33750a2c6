"""What the server this process runs under can hold: its request threads, when known.

An open stream holds one of them for as long as it lasts, so the streams a process lets open
(``STREAM_MAX_OPEN``) must leave threads for every other request. The threads are, in order:

- the setting ``SERVER_THREADS`` (``NRLLM_SERVER_THREADS``), when above 0;
- gunicorn's ``threads``, when this process is gunicorn (or ``GUNICORN_CMD_ARGS`` is set): from
  its command line, else ``GUNICORN_CMD_ARGS``, else its configuration file (``-c``, or
  ``./gunicorn.conf.py``) where it assigns a literal number (``threads = 32``). A worker class
  other than ``sync`` and ``gthread`` serves requests without a thread each: not known then.

``None``: not known (another server, the development server). ``STREAM_MAX_OPEN`` left unset
(``None``) is then ``DEFAULT_STREAM_MAX_OPEN``; with the threads known, half of them.
"""

from __future__ import annotations

import ast
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..conf import app_settings

DEFAULT_STREAM_MAX_OPEN = 16  # half of the deploy guide's `gunicorn --threads 32`
THREADED_WORKERS = {"sync", "gthread"}


def stream_max_open() -> int:
    """The open streams this process allows (0 or less: no bound): ``STREAM_MAX_OPEN`` when set,
    else half the server's threads (at least 1), else ``DEFAULT_STREAM_MAX_OPEN``."""
    chosen = app_settings.STREAM_MAX_OPEN
    if chosen is not None:
        return int(chosen)
    threads = server_threads()
    return DEFAULT_STREAM_MAX_OPEN if threads is None else max(1, threads // 2)


def server_threads(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int | None:
    """The request threads of this process's server (see the module docstring), or ``None``."""
    chosen = int(app_settings.SERVER_THREADS or 0)
    if chosen > 0:
        return chosen
    return gunicorn_threads(sys.argv if argv is None else argv, os.environ if environ is None else environ)


def gunicorn_threads(argv: Sequence[str], environ: Mapping[str, str]) -> int | None:
    """gunicorn's ``threads`` for a process started as ``argv`` in ``environ``; ``None`` when it
    is not gunicorn, or its workers hold no thread per request."""
    started = Path(argv[0]) if argv else Path()
    # ``gunicorn ...`` or ``python -m gunicorn ...`` (argv[0] is then gunicorn/__main__.py)
    is_gunicorn = started.name.startswith("gunicorn") or started.parent.name == "gunicorn"
    env_args = shlex.split(environ.get("GUNICORN_CMD_ARGS", ""))
    if not is_gunicorn and not env_args:
        return None
    line = _options(list(argv[1:]) if is_gunicorn else [])
    env = _options(env_args)
    config = _config_file(line.get("config") or env.get("config") or "gunicorn.conf.py")
    merged = {**config, **env, **line}  # gunicorn's own order: the file, the environment, the command line
    worker = str(merged.get("worker_class") or "sync")
    if worker not in THREADED_WORKERS:
        return None
    try:
        threads = int(merged.get("threads") or 1)
    except (TypeError, ValueError):
        return None
    return threads if threads > 0 else None


def _options(args: list[str]) -> dict[str, Any]:
    """``threads``, ``worker_class`` and ``config`` as gunicorn's own parser reads ``args``."""
    try:
        from gunicorn.config import Config
    except ImportError:  # GUNICORN_CMD_ARGS in a process that has no gunicorn to read it
        return {}
    try:
        parsed, _ = Config().parser().parse_known_args(args)
    except SystemExit:  # what gunicorn itself refuses to start with
        return {}
    given = {name: getattr(parsed, name, None) for name in ("threads", "worker_class", "config")}
    return {name: value for name, value in given.items() if value}


def _config_file(name: str) -> dict[str, Any]:
    """The literal ``threads`` and ``worker_class`` a gunicorn configuration file assigns (read,
    never executed: a value it computes is not known; set ``NRLLM_SERVER_THREADS`` then)."""
    path = Path(name.removeprefix("python:"))
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return {}
    found: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("threads", "worker_class") and isinstance(node.value, ast.Constant):
                found[node.targets[0].id] = node.value.value
    return found
