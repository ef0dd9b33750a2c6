"""The wheel holds the app whole (templates, static files, migrations, their SQL) and says what it needs."""

from __future__ import annotations

import zipfile
from email.parser import Parser
from pathlib import Path

from .conftest import ROOT

PACKAGE = ROOT / "nrllm_agents"


def test_the_wheel_holds_every_template_static_file_and_migration(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder in ("templates", "static", "migrations", "store/sql"):
        files = [p for p in (PACKAGE / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        assert files, folder
        for path in files:
            assert path.relative_to(ROOT).as_posix() in names, path
    assert "nrllm_agents/py.typed" in names
    assert not [n for n in names if n.startswith(("config/", "tests/", "bench/"))]


def test_the_metadata_names_the_distribution_its_dependencies_and_extras(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as whl:
        (meta,) = [n for n in whl.namelist() if n.endswith(".dist-info/METADATA")]
        message = Parser().parsestr(whl.read(meta).decode())
    assert message["Name"] == "nrllm-agents"
    assert message["Version"]
    assert message["License-Expression"] == "MIT"
    classifiers = message.get_all("Classifier")
    for classifier in (
        "Python :: 3.11",
        "Python :: 3.12",
        "Python :: 3.13",
        "Django :: 5.2",
        "Django :: 6.0",
        "Django :: 6.1",
    ):
        assert any(c.endswith(classifier) for c in classifiers), classifier
    requires = message.get_all("Requires-Dist")
    plain = [r for r in requires if "extra ==" not in r]
    assert any(r.startswith("django") or r.startswith("Django") for r in plain)
    # the vendor SDKs and the MCP client are extras, not what every install carries
    for sdk in ("anthropic", "google-genai", "mcp", "openai", "psycopg"):
        assert not any(r.lower().startswith(sdk) for r in plain), sdk
    assert {"anthropic", "gemini", "mcp", "openai", "otel", "postgres", "all"} <= set(message.get_all("Provides-Extra"))
