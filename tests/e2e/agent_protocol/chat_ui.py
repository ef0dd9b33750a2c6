"""LangGraph's chat UI (``create-agent-chat-app``'s vite template), scaffolded, installed and
built by the commands of docs/agent-protocol.md ("A chat UI on another origin"), as written.

The build lines run once in ``.chat-ui/<hash of the lines>/`` (gitignored) and are kept there:
CI builds it ahead of the tests (``python3 tests/e2e/agent_protocol/chat_ui.py`` in
``.ci/run``), and a test that finds no build makes it, or fails saying why. The page's last
line, ``npm run preview``, is what a test starts to serve the build (on a free port).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "agent-protocol.md"
SECTION = "## A chat UI on another origin"
CACHE = ROOT / ".chat-ui"
SERVE = "npm run preview"


class BuildFailed(RuntimeError):
    pass


def block() -> list[str]:
    """The section's first ``bash`` block, one command a line."""
    text = PAGE.read_text()
    body = text[text.index(SECTION) :]
    code = body.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in code.splitlines() if line.strip()]


def build_lines() -> list[str]:
    lines = block()
    assert lines[-1].startswith(SERVE), f"the block should end by serving the build: {lines[-1]}"
    return lines[:-1]


def serve_line() -> str:
    return block()[-1]


def built() -> Path:
    """The web app's folder (``apps/web``) with its production build in ``dist/``: built now
    by the page's lines unless an earlier run of the same lines left it."""
    lines = build_lines()
    home = CACHE / hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]
    web = home / _web_folder(lines)
    if (web / "dist" / "index.html").is_file() and (home / "built").is_file():
        return web
    for stale in CACHE.glob("*"):  # a build of other lines (an older page) or a broken one
        shutil.rmtree(stale, ignore_errors=True)
    home.mkdir(parents=True)
    # The lines are the reader's: one shell, each line as written; `cd` carries over.
    script = "set -euo pipefail\n" + "\n".join(lines) + "\n"
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=home,
        env={**os.environ, "CI": "1", "npm_config_update_notifier": "false"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0 or not (web / "dist" / "index.html").is_file():
        raise BuildFailed(
            f"the chat UI did not build (exit {done.returncode}) in {home}:\n{script}\n"
            f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
        )
    (home / "built").write_text("\n".join(lines))
    return web


def _web_folder(lines: list[str]) -> Path:
    """Where the block's ``cd`` lines lead (relative to where it starts)."""
    where = Path()
    for line in lines:
        if line.startswith("cd "):
            where = where / line[3:].strip()
    return where


if __name__ == "__main__":
    try:
        print(built())
    except BuildFailed as failed:
        print(failed, file=sys.stderr)
        sys.exit(1)
