"""Real MCP servers for tests and benchmarks: ours (``mcp_server.py``) and the reference one.

``ours(record)`` and ``everything()`` are ``mcpServers`` entries for stdio. ``HttpServer``
runs either over Streamable HTTP on a free loopback port for the length of a ``with`` block.
The reference server is ``@modelcontextprotocol/server-everything`` from npm, installed by
``.ci/run`` into ``.mcp-servers/``; asking for it when Node or the package is missing raises
(tests fail, never skip).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
EVERYTHING = ROOT / ".mcp-servers/node_modules/@modelcontextprotocol/server-everything/dist/index.js"


def ours(record: Path | str | None = None, *, switches: tuple[str, ...] = (), **extra: Any) -> dict[str, Any]:
    """A stdio entry for our test server (``record``: its server-side event file; ``switches``:
    more arguments, such as ``("--hang-listing",)`` or ``("--banner", "TEXT")``)."""
    args = ["-m", "nrllm_agents.testing.mcp_server", *switches]
    if record is not None:
        args += ["--record", str(record)]
    return {"command": sys.executable, "args": args, "cwd": str(ROOT), "env": {"PYTHONPATH": str(ROOT)}, **extra}


def node() -> str:
    found = shutil.which("node")
    if found is None:
        raise RuntimeError("Node.js is not installed: the MCP tests need it (see .ci/run)")
    if not EVERYTHING.exists():
        raise RuntimeError(
            f"{EVERYTHING} is missing: run .ci/run (npm install @modelcontextprotocol/server-everything)"
        )
    return found


def everything(**extra: Any) -> dict[str, Any]:
    """A stdio entry for the reference server ``@modelcontextprotocol/server-everything``."""
    return {"command": node(), "args": [str(EVERYTHING), "stdio"], **extra}


def records(path: Path | str) -> list[dict[str, Any]]:
    """The events our server recorded on its side (one JSON object per line)."""
    path = Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HttpServer:
    """One MCP server over Streamable HTTP on loopback: ``kind`` ``"ours"`` or ``"everything"``."""

    def __init__(self, kind: str = "ours", record: Path | str | None = None, log: Path | str | None = None) -> None:
        self.kind = kind
        self.port = free_port()
        self.record = record
        self.log = Path(log) if log else None
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def entry(self, **extra: Any) -> dict[str, Any]:
        return {"type": "http", "url": self.url, **extra}

    def __enter__(self) -> HttpServer:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PORT": str(self.port)}
        if self.kind == "ours":
            command = [sys.executable, "-m", "nrllm_agents.testing.mcp_server", "--http", str(self.port)]
            if self.record is not None:
                command += ["--record", str(self.record)]
        else:
            command = [node(), str(EVERYTHING), "streamableHttp"]
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL  # noqa: SIM115 - closed with the process
        self.process = subprocess.Popen(command, env=env, cwd=ROOT, stdout=out, stderr=out, start_new_session=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the MCP server {command!r} exited with {self.process.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.__exit__()
        raise RuntimeError(f"the MCP server {command!r} did not listen on {self.port} within 30 s")

    def __exit__(self, *exc: Any) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, 15)
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait()
