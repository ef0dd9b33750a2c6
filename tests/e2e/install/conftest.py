"""The distribution as a host project gets it: the wheel built from this checkout, and a virtualenv
of its own with the wheel installed (once per session: building and installing take seconds).

The virtualenv installs the wheel with ``--no-deps`` and reaches the dependencies through a
``.pth`` naming this interpreter's site-packages, so no test downloads anything; the app itself
comes from the wheel, never from the checkout (``host_python`` checks where it imports it from).
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


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


@pytest.fixture(scope="session")
def host_python(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a fresh virtualenv holding the wheel (and only the wheel) of nrllm_agents."""
    env_dir = tmp_path_factory.mktemp("host-venv")
    venv.create(env_dir, with_pip=True, symlinks=True)
    python = env_dir / "bin" / "python"
    purelib = Path(
        subprocess.check_output(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    # the dependencies: every site directory this interpreter reads (the shared virtualenv's); its
    # own .pth files are not read from there, so an editable install of the checkout stays out;
    # --ignore-installed: its metadata is visible, and must not stop pip installing the wheel
    shared = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()] or [
        sysconfig.get_paths()["purelib"]
    ]
    (purelib / "zz_shared_dependencies.pth").write_text("\n".join(shared) + "\n")
    subprocess.run(
        [
            python,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--ignore-installed",
            "--disable-pip-version-check",
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    where = subprocess.check_output(
        [python, "-c", "import nrllm_agents; print(nrllm_agents.__file__)"], text=True, cwd=env_dir
    )
    assert where.startswith(str(purelib)), where
    return python
