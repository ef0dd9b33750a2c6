"""The manual builds strictly (no broken link, no page left out of the build), with the REST API
reference generated from the schema the app serves."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .conftest import ROOT


def test_mkdocs_builds_strictly(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    rest = (tmp_path / "reference" / "rest-api" / "index.html").read_text()
    assert "/api/runs/{id}/cancel/" in rest and "Cancel a run" in rest
    assert (tmp_path / "quickstart" / "index.html").exists()


def test_every_requirements_file_the_pages_name_exists() -> None:
    """Issue 48: metrics.md said ``pip install -r requirements-otel.txt``, a file that never existed."""
    import re

    named = {
        (page.relative_to(ROOT).as_posix(), name.strip("`\"'"))
        for page in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
        for name in re.findall(r"pip install -r (\S+)", page.read_text())
    }
    assert [(page, name) for page, name in named if not (ROOT / name).is_file()] == []
