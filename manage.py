#!/usr/bin/env python
"""Django's command-line utility for administrative tasks.

In a checkout where ``make`` ran, ``.env`` beside this file (``make venv`` writes it: development
mode, ``DJANGO_DEBUG=1``) is read for what the environment does not say, so the documented
``.venv/bin/python manage.py ...`` works outside ``make``. It is read only when the environment
names no ``DJANGO_SECRET_KEY``: a deploy sets one (and has no ``.env``); without either, the
settings refuse to start, as in production.
"""

import os
import sys
from pathlib import Path


def read_env_file(path: Path) -> None:
    """``NAME=value`` lines of ``path`` (``#`` comments, blank lines) into the environment,
    unless the environment already names them; nothing if the file is missing."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return
    for line in lines:
        name, sep, value = line.strip().partition("=")
        if sep and not name.startswith("#"):
            os.environ.setdefault(name.strip(), value.strip())


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    if not os.environ.get("DJANGO_SECRET_KEY", "").strip():
        read_env_file(Path(__file__).resolve().parent / ".env")
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured
    from django.core.management import execute_from_command_line

    try:
        settings.INSTALLED_APPS  # noqa: B018  (loads the settings module: a bad variable is named here)
    except ImproperlyConfigured as exc:
        sys.exit(f"manage.py: {exc}")
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
