"""Docstrings stay short: a module says why it exists, a function what it returns and raises.

A docstring that grows into a manual (protocols, deployment advice, proxy settings) belongs in
``docs/`` (``docs/internals.md`` holds the design notes); the docstring points there.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGE = ROOT / "nrllm_agents"
MAX_LINES = 20
Documented = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef


def long_docstrings(package: Path = PACKAGE, limit: int = MAX_LINES) -> list[str]:
    """Every module, class and function docstring of the package longer than ``limit`` lines."""
    found = []
    for path in sorted(package.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if not isinstance(node, Documented):
                continue
            docstring = ast.get_docstring(node, clean=True)
            if docstring is None:
                continue
            lines = len(docstring.strip().splitlines())
            if lines > limit:
                where = f"{path.relative_to(package.parent)}:{node.body[0].lineno}"
                found.append(f"{where} {getattr(node, 'name', '<module>')}: {lines} lines")
    return found


def test_no_docstring_is_longer_than_twenty_lines() -> None:
    assert long_docstrings() == [], "move the manual to docs/ and leave a few lines that point there"


def test_the_check_finds_a_long_docstring(tmp_path: Path) -> None:
    module = tmp_path / "manual.py"
    body = "\n".join(f"line {n}" for n in range(MAX_LINES))
    module.write_text(f'"""Title.\n\n{body}\n"""\n\n\ndef short():\n    """One line."""\n')
    (tmp_path / "migrations").mkdir()
    (tmp_path / "migrations" / "0001_initial.py").write_text(module.read_text())
    found = long_docstrings(tmp_path)
    assert len(found) == 1 and "<module>: 22 lines" in found[0]
