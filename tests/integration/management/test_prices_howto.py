"""docs/howto/limits.md's "Prices and spend" block, as written, on a database with no connection:
it makes the connection its first price names (issue 48: it assumed one from another how-to)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

PAGE = ROOT / "docs" / "howto" / "limits.md"

pytestmark = pytest.mark.processes  # the block's commands run as manage.py processes


@pytest.mark.django_db(transaction=True)  # the commands are other processes: they see committed rows
def test_the_prices_block_runs_as_written(child_env) -> None:
    text = PAGE.read_text()
    block = text[text.index("## Prices and spend") :].split("```sh\n", 1)[1].split("```", 1)[0]
    lines = [line for line in block.splitlines() if line and not line.startswith("#")]
    assert "agent_connections add vendor" in lines[0]
    out = ""
    for line in lines:
        assert line.startswith(".venv/bin/python manage.py "), line
        command = line.replace(".venv/bin/python", sys.executable, 1)
        done = subprocess.run(["bash", "-c", command], cwd=ROOT, env=child_env, capture_output=True, text=True)
        assert done.returncode == 0, f"{line}: {done.stdout}{done.stderr}"
        out = done.stdout
    prices = [json.loads(line) for line in out.splitlines()]  # JSON lines
    assert {(p.get("connection"), p["model"]) for p in prices} >= {("vendor", "gpt-4o-mini")}, prices
