"""An MCP server for tests and benchmarks, built with the ``mcp`` SDK's server side.

``python -m nrllm_agents.testing.mcp_server [--http PORT] [--record FILE]`` serves over stdio
(default) or Streamable HTTP on 127.0.0.1. With ``--record`` (or ``NRLLM_MCP_RECORD``) it appends
one JSON line per event (``started``, ``progress``, ``cancelled``, ``finished``) to FILE, on the
server's side of the pipe, so a test sees what a cancel did there. Its tools include well-behaved
ones (``slow``, ``echo``, ``erase``) and hostile ones (``huge``, ``garbage``, ``silent``, ``die``,
``failing``, ``structured``); ``--stubborn``, ``--hang-listing`` and ``--banner`` make the server
itself misbehave.

Every tool and flag: docs/internals.md ("The MCP server").
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

_record_lock = threading.Lock()
RECORD = os.environ.get("NRLLM_MCP_RECORD", "")


def record(event: str, tool: str, ctx: Context | None, **extra: Any) -> None:
    if not RECORD:
        return
    line = {"event": event, "tool": tool, "t": time.time(), "pid": os.getpid(), "ppid": os.getppid(), **extra}
    if ctx is not None:
        line["request_id"] = ctx.request_id
        meta = _meta(ctx)
        if meta:
            line["meta"] = meta
    with _record_lock, open(RECORD, "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")


def _meta(ctx: Context) -> dict[str, Any]:
    """The inbound request's ``_meta``, JSON-ready (empty when it had none)."""
    try:
        meta = ctx.request_context.meta
    except (AttributeError, ValueError, LookupError):
        return {}
    found: dict[str, Any] = json.loads(json.dumps(dict(meta or {}), default=str))
    return found


server = MCPServer("nrllm-test-server")
# The SDK moves the wire off fd 1 (so that a stray print cannot break it); ``garbage`` writes
# to a duplicate taken before, which is the wire itself.
WIRE = os.dup(1)
READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, destructive_hint=False)


@server.tool(annotations=READ_ONLY)
async def slow(ctx: Context, seconds: float = 30.0, steps: int = 30) -> str:
    """Work for ``seconds``, reporting progress ``steps`` times; a cancel stops it."""
    record("started", "slow", ctx, seconds=seconds)
    try:
        for i in range(1, steps + 1):
            await anyio.sleep(seconds / steps)
            await ctx.report_progress(i, steps, f"step {i} of {steps}")
            record("progress", "slow", ctx, progress=i)
    except anyio.get_cancelled_exc_class():
        record("cancelled", "slow", ctx)
        raise
    record("finished", "slow", ctx)
    return f"worked {seconds:g} s in {steps} steps"


@server.tool(annotations=READ_ONLY)
async def echo(ctx: Context, text: str) -> str:
    """Answer with the text given."""
    record("started", "echo", ctx)
    return text


@server.tool(annotations=ToolAnnotations(destructive_hint=True, read_only_hint=False))
async def erase(ctx: Context, target: str) -> str:
    """Pretend to erase ``target`` (a destructive tool: approval required by default)."""
    record("started", "erase", ctx, target=target)
    return f"erased {target}"


@server.tool()
async def huge(ctx: Context, chars: int = 5_000_000) -> str:
    """Answer with ``chars`` characters."""
    record("started", "huge", ctx)
    return "x" * chars


@server.tool()
async def garbage(ctx: Context) -> str:
    """Write a line that is not JSON-RPC to stdout, then never answer."""
    record("started", "garbage", ctx)
    os.write(WIRE, b"this is {not json\n")
    await anyio.sleep(3600)
    return "never"


@server.tool()
async def silent(ctx: Context) -> str:
    """Never answer, even when told to stop."""
    record("started", "silent", ctx)
    with anyio.CancelScope(shield=True):
        await anyio.sleep(3600)
    return "never"


@server.tool()
async def die(ctx: Context) -> str:
    """Exit the whole server process in the middle of the call."""
    record("started", "die", ctx)
    await anyio.sleep(0.2)
    os._exit(3)


@server.tool()
async def failing(ctx: Context) -> str:
    """Fail: the result has ``isError``."""
    record("started", "failing", ctx)
    raise ToolError("the tool failed on purpose")


@server.tool()
async def structured(ctx: Context, city: str) -> dict[str, Any]:
    """Answer with structured content."""
    record("started", "structured", ctx)
    return {"city": city, "temperature": 21.5}


@server.tool(annotations=READ_ONLY)
async def whoami(ctx: Context) -> dict[str, Any]:
    """Say which process serves, and what secret it was given (tests only)."""
    return {"pid": os.getpid(), "token": os.environ.get("NRLLM_TEST_SECRET", "")}


def main(argv: list[str] | None = None) -> None:
    global RECORD
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", type=int, default=None, help="serve Streamable HTTP on this port")
    parser.add_argument("--record", default=RECORD, help="append server-side events to this file")
    parser.add_argument(
        "--stubborn",
        action="store_true",
        help="behave badly: ignore SIGTERM, and live on after stdin closes (only SIGKILL ends it)",
    )
    parser.add_argument("--hang-listing", action="store_true", help="never answer tools/list")
    parser.add_argument("--hang-listing-when", default="", help="never answer tools/list while this file exists")
    parser.add_argument("--banner", default="", help="write this line to stderr on start")
    args = parser.parse_args(argv)
    RECORD = args.record
    if args.banner:
        sys.stderr.write(args.banner + "\n")
        sys.stderr.flush()
    if args.hang_listing or args.hang_listing_when:
        listing = server.list_tools

        async def hanging() -> Any:
            if args.hang_listing or os.path.exists(args.hang_listing_when):
                await anyio.sleep(3600)
            return await listing()

        server.list_tools = hanging  # type: ignore[method-assign]
    if args.stubborn:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.http is None:
        try:
            server.run("stdio")
        finally:
            if args.stubborn:  # whatever ended the session (its input closed, a broken pipe)
                record("lingering", "", None)
                time.sleep(3600)
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.http)


if __name__ == "__main__":
    main()
