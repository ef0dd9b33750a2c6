"""``make demo`` ends with exit 0 when its run was cancelled (issue 48: ``make: *** Error 3``),
and still fails when the run failed. The recipe runs as written, with a stand-in for the
interpreter that answers ``agent_run`` with the exit code under test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.processes  # make, and the recipe's shell


@pytest.mark.parametrize("agent_run_exit, make_exit", [(0, 0), (3, 0), (1, 2)])
def test_a_cancelled_demo_exits_0(tmp_path: Path, agent_run_exit: int, make_exit: int) -> None:
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\n[ "$2" = agent_run ] && exit {agent_run_exit}\nexit 0\n')
    python.chmod(0o755)
    done = subprocess.run(
        ["make", "--no-print-directory", "demo", f"PY={python}", f"VENV={sys.prefix}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == make_exit, done.stdout + done.stderr
