"""How soon an MCP server learns of a cancel: through our runtime vs a direct ``mcp`` SDK call.

Both contenders call the ``slow`` tool of our test server (``nrllm_agents.testing.mcp_server``,
a stdio process of its own each) and cancel it once the server has reported progress; the
server records, on its side of the pipe, when its handler is cancelled. Latency is that time
minus the moment just before the cancel was issued:

- **direct**: the SDK's ``ClientSession.call_tool`` awaited by a task on an asyncio loop of
  its own; the cancel is ``task.cancel()`` (the SDK then writes ``notifications/cancelled``);
- **ours**: an interactive run (``AgentRuntime.run``) calling the tool as ``ours__slow``; the
  cancel is ``store.cancel`` on another connection, as another process would commit it, so it
  reaches the run only through the signal path: the ``NOTIFY`` (sent on commit), the process's
  listener, the row re-read, the run's cancel token, the hub's loop, the same SDK call.

Samples alternate between the two. The ratio is ours / direct (the cost of the database and
the signal path in front of the same SDK cancel).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/mcp_cancel.py [--samples 20]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from step_overhead import production_settings, summary, throwaway_database  # noqa: E402  (bench/ is this script's directory)

from nrllm_agents.testing import mcp_servers  # noqa: E402

SLOW = {"seconds": 60, "steps": 600}


def wait_started(record: Path, after: int) -> dict:
    """The newest ``slow`` call once it has reported progress (polls the server's own record)."""
    while True:
        events = mcp_servers.records(record)[after:]
        started = [e for e in events if e["event"] == "started"]
        if started and any(e["event"] == "progress" and e["request_id"] == started[-1]["request_id"] for e in events):
            return started[-1]
        time.sleep(0.005)


def wait_cancelled(record: Path, request_id: str) -> float:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for e in mcp_servers.records(record):
            if e["event"] == "cancelled" and e["request_id"] == request_id:
                return float(e["t"])
        time.sleep(0.005)
    raise RuntimeError(f"the server never saw request {request_id} cancelled")


class Direct:
    """The SDK alone: one session on a loop thread; each sample is a task cancelled by ``task.cancel``."""

    def __init__(self, record: Path) -> None:
        self.record = record
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.opened = threading.Event()
        self.owner = asyncio.run_coroutine_threadsafe(self._own(), self.loop)
        if not self.opened.wait(60):
            raise RuntimeError("the direct session did not open")

    async def _own(self) -> None:
        """Enter and leave the transport and the session in one task (anyio's rule)."""
        from mcp.client.session import ClientSession
        from mcp.client.stdio import StdioServerParameters, stdio_client

        entry = mcp_servers.ours(self.record)
        params = StdioServerParameters(command=entry["command"], args=entry["args"], cwd=entry["cwd"], env=entry["env"])
        self.stop = asyncio.Event()
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            self.session = session
            self.opened.set()
            await self.stop.wait()

    async def _progress(self, *args: object) -> None:
        return None

    def sample(self) -> float:
        before = len(mcp_servers.records(self.record))
        holder: dict = {}

        async def start() -> None:
            holder["task"] = asyncio.ensure_future(
                self.session.call_tool("slow", SLOW, progress_callback=self._progress)
            )

        asyncio.run_coroutine_threadsafe(start(), self.loop).result(10)
        call = wait_started(self.record, before)
        t0 = time.time()
        self.loop.call_soon_threadsafe(holder["task"].cancel)
        return wait_cancelled(self.record, call["request_id"]) - t0

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.owner.result(30)


class Ours:
    """Interactive runs through the runtime; each is cancelled by ``store.cancel`` on another connection."""

    def __init__(self, record: Path) -> None:
        from django.conf import settings

        self.record = record
        settings.NRLLM_AGENTS = {
            **getattr(settings, "NRLLM_AGENTS", {}),
            "MCP_SERVERS": {"mcpServers": {"ours": mcp_servers.ours(record)}},
        }

    def sample(self) -> float:
        from django.db import connection

        from nrllm_agents import store
        from nrllm_agents.models import AgentRun, CancelSource
        from nrllm_agents.runtime.agent_runtime import AgentRuntime

        before = len(mcp_servers.records(self.record))
        done = threading.Event()

        def segment() -> None:
            try:
                AgentRuntime().run(
                    {
                        "prompt": "p",
                        "tools": ["ours__slow"],
                        "script": [{"tool_calls": [{"name": "ours__slow", "arguments": SLOW}]}, {"content": "x"}],
                    }
                )
            finally:
                connection.close()
                done.set()

        threading.Thread(target=segment, daemon=True).start()
        call = wait_started(self.record, before)
        run_id = AgentRun.objects.order_by("-created_at").values_list("pk", flat=True).first()
        t0 = time.time()
        assert store.cancel(run_id, source=CancelSource.SYSTEM, reason="bench").applied
        latency = wait_cancelled(self.record, call["request_id"]) - t0
        done.wait(30)
        return latency


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=20, help="cancels timed per contender")
    parser.add_argument("--database", default="nrllm_bench_mcp_cancel", help="throwaway database to create and drop")
    args = parser.parse_args()
    production_settings()
    with throwaway_database(args.database), tempfile.TemporaryDirectory() as tmp:
        from nrllm_agents.mcp.client import hub
        from tests.waits import wait_listening

        direct, ours = Direct(Path(tmp) / "direct.jsonl"), Ours(Path(tmp) / "ours.jsonl")
        wait_listening(10)
        ours.sample()  # warm up: starts the server, the listener and the connections
        direct.sample()
        samples: dict[str, list[float]] = {"direct": [], "ours": []}
        for i in range(args.samples):
            for name in ("direct", "ours") if i % 2 == 0 else ("ours", "direct"):
                samples[name].append((direct if name == "direct" else ours).sample())
        direct.close()
        hub().close()
    d, o = summary(samples["direct"]), summary(samples["ours"])

    def line(figures: dict[str, float]) -> str:
        return f"mean {figures['mean']:6.1f} ms  p50 {figures['p50']:6.1f} ms  p99 {figures['p99']:6.1f} ms"

    print(f"MCP cancel latency, {args.samples} samples each (cancel issued -> server sees its handler cancelled)")
    print(f"  direct mcp SDK (task.cancel):            {line(d)}")
    print(f"  ours (commit -> NOTIFY -> token -> SDK): {line(o)}")
    print(
        f"  ratio ours / direct (p50): {o['p50'] / max(d['p50'], 1e-6):.1f}x; ours under 50 ms in "
        f"{sum(1 for s in samples['ours'] if s < 0.05)}/{len(samples['ours'])} samples"
    )


if __name__ == "__main__":
    main()
