"""How long ``manage.py agent_cancel`` takes to start: against a bare ``django.setup()``.

Both run in fresh processes on the same settings (production's: ``DJANGO_DEBUG=0``) and a
throwaway SQLite database migrated first: ``agent_cancel`` of a run id that does not exist
(setup, the command's system checks and imports, one query), and ``python -c "import django;
django.setup()"`` (the settings and every installed app, the floor any command pays). Each is
timed ``--runs`` times, interleaved; the medians and their ratio are printed, and the sum of
the self times ``python -X importtime`` reports for one start of each (what the imports cost,
which load on the machine distorts less than the wall clock).

    .venv/bin/python bench/cli_startup.py [--runs 10]
"""

from __future__ import annotations

import argparse
import base64
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETUP = "import django; django.setup()"


def import_seconds(stderr: str) -> float:
    """The sum of the self times in a ``-X importtime`` report, in seconds."""
    rows = [line.split("|") for line in stderr.splitlines() if line.startswith("import time:")]
    return sum(int(row[0].removeprefix("import time:")) for row in rows if row[0].strip()[-1].isdigit()) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DJANGO_DEBUG": "0",
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
            "NRLLM_SECRET_KEYS": base64.urlsafe_b64encode(secrets.token_bytes(32)).decode(),  # a Fernet key
            "DATABASE_URL": f"sqlite:///{scratch}/bench.sqlite3",
            "PYTHONPATH": str(ROOT),
        }
        env.pop("REDIS_URL", None)
        subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
        commands = {
            "agent_cancel": [sys.executable, "manage.py", "agent_cancel", str(uuid.uuid4())],
            "django.setup()": [sys.executable, "-c", SETUP],
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.runs):
            for name, argv in commands.items():
                started = time.perf_counter()
                subprocess.run(argv, cwd=ROOT, env=env, capture_output=True)
                times[name].append(time.perf_counter() - started)
        imports = {
            name: import_seconds(
                subprocess.run(
                    [argv[0], "-X", "importtime", *argv[1:]], cwd=ROOT, env=env, capture_output=True, text=True
                ).stderr
            )
            for name, argv in commands.items()
        }
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name in commands:
        print(
            f"{name:15} median of {args.runs}: {medians[name] * 1000:7.0f} ms",
            f"  imports (one start): {imports[name] * 1000:6.0f} ms",
        )
    print(
        f"agent_cancel / django.setup(): {medians['agent_cancel'] / medians['django.setup()']:.2f}x (wall), "
        f"{imports['agent_cancel'] / imports['django.setup()']:.2f}x (imports); load average {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
