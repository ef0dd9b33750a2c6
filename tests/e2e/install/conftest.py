"""The distribution as a host project gets it: the wheel built from this checkout, and a virtualenv
of its own with the wheel installed as `pip install nrllm-agents` would (once per session).

The virtualenv is fresh and plain: pip installs the wheel with the dependencies its metadata
declares and nothing else, so a dependency missing from ``[project].dependencies`` fails here,
and the quickstart runs on the lean install it documents (no extra). The versions come from the
lock of the running stack (``locks/``), so a new release elsewhere cannot change the test.
"""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
# the lock of each supported stack, by the interpreter's version (Makefile: `make lock`)
LOCKS = {(3, 13): "py313-django6.txt", (3, 11): "py311-django52.txt"}


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel ``python -m build`` makes from this checkout (with the project's own backend)."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        cwd=out,
    )
    (built,) = out.glob("nrllm_agents-*.whl")
    return built


def _fresh_virtualenv(tmp_path_factory: pytest.TempPathFactory, name: str, requirement: str) -> Path:
    """The python of a new virtualenv where pip installed ``requirement`` (the wheel, with or
    without extras) and what its metadata declares, at the versions of the stack's lock."""
    env_dir = tmp_path_factory.mktemp(name)
    venv.create(env_dir, with_pip=True, symlinks=True)
    python = env_dir / "bin" / "python"
    lock = LOCKS.get(sys.version_info[:2])
    pinned = ["--constraint", str(ROOT / "locks" / lock)] if lock else []
    installed = subprocess.run(
        [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *pinned, requirement],
        capture_output=True,
        text=True,
    )
    assert installed.returncode == 0, installed.stderr[-2000:]
    return python


@pytest.fixture(scope="session")
def host_python(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a fresh virtualenv holding the wheel of nrllm_agents and its dependencies."""
    python = _fresh_virtualenv(tmp_path_factory, "host-venv", str(wheel))
    purelib = Path(
        subprocess.check_output(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    where = subprocess.check_output(
        [python, "-c", "import nrllm_agents; print(nrllm_agents.__file__)"], text=True, cwd=python.parent
    )
    assert where.startswith(str(purelib)), where
    return python


@pytest.fixture(scope="session")
def host_python_postgres(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of another fresh virtualenv, with ``nrllm-agents[postgres]`` from the wheel."""
    return _fresh_virtualenv(tmp_path_factory, "host-venv-postgres", f"{wheel}[postgres]")
