"""The distribution as a host project gets it before it is published: the sdist and the wheel that
``make dist`` builds from this checkout, or the checkout itself, each in a virtualenv of its own
(once per session).

The virtualenv is fresh and plain: pip installs the distribution with the dependencies its
metadata declares and nothing else, so a dependency missing from ``[project].dependencies`` fails
here, and the quickstart runs on the lean install it documents (no extra). The versions come from
the lock of the running stack (``locks/``), so a new release elsewhere cannot change the test.
"""

from __future__ import annotations

import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
# the lock of each supported stack, by the interpreter's version (Makefile: `make lock`)
LOCKS = {(3, 13): "py313-django6.txt", (3, 11): "py311-django52.txt"}


@dataclass(frozen=True)
class Dist:
    sdist: Path
    wheel: Path


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """The sdist and the wheel ``make dist`` builds from this checkout (README, docs/quickstart.md),
    with the running virtualenv; the target fails unless ``twine check --strict`` passes both."""
    out = tmp_path_factory.mktemp("dist")
    made = subprocess.run(
        ["make", "--no-print-directory", "dist", f"DIST={out}", f"VENV={sys.prefix}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
    assert made.stdout.count("PASSED") == 2, made.stdout[-2000:]
    (sdist,) = out.glob("nrllm_agents-*.tar.gz")
    (wheel,) = out.glob("nrllm_agents-*.whl")
    return Dist(sdist, wheel)


@pytest.fixture(scope="session")
def wheel(dist: Dist) -> Path:
    return dist.wheel


def _fresh_virtualenv(tmp_path_factory: pytest.TempPathFactory, name: str, requirement: str) -> Path:
    """The python of a new virtualenv where pip installed ``requirement`` (the sdist, or the
    checkout, with or without extras) and what its metadata declares, at the versions of the
    stack's lock."""
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
def host_python(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a fresh virtualenv holding nrllm_agents, installed from its sdist (pip builds
    the wheel from it: what the sdist holds is enough), and its dependencies."""
    python = _fresh_virtualenv(tmp_path_factory, "host-venv", str(dist.sdist))
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
def host_python_postgres(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of another fresh virtualenv, with ``nrllm-agents[postgres]`` installed from this
    checkout as the docs write it (``pip install "path/to/checkout[postgres]"``)."""
    return _fresh_virtualenv(tmp_path_factory, "host-venv-postgres", f"{ROOT}[postgres]")
