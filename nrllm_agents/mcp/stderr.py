"""A stdio MCP server's stderr, into the log: a pipe, and a thread that logs it a line at a time.

The SDK's ``stdio_client`` hands its ``errlog`` to the server process as its stderr. Left to
``sys.stderr``, a server's banner (``Secure MCP Filesystem Server running on stdio``) and its
tracebacks land in a command's output and in gunicorn's stderr, outside the structured logs.
Each line is logged at INFO, tagged with the server's name (in the message and as the record's
``mcp_server``), its expanded secrets masked. The last lines are kept, so that a server that
exits during its handshake can be refused with what it said.

Plain Python: no Django.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
from collections.abc import Callable
from typing import TextIO

logger = logging.getLogger("nrllm_agents.mcp.stderr")

_MAX_LINE = 2000


class StderrLog:
    """One server start's stderr: ``writer`` goes to the process, a daemon thread reads the other end."""

    def __init__(self, server: str, redact: Callable[[str], str]) -> None:
        self.server = server
        self._redact = redact
        self._tail: collections.deque[str] = collections.deque(maxlen=5)
        self.closed = threading.Event()  # set once the reader saw the end (every writer closed)
        read, write = os.pipe()
        self.writer: TextIO = os.fdopen(write, "w")
        threading.Thread(target=self._read, args=(read,), name=f"nrllm-mcp-stderr-{server}", daemon=True).start()

    def _read(self, fd: int) -> None:
        try:
            with os.fdopen(fd, "rb") as lines:
                for raw in lines:
                    line = raw.decode("utf-8", errors="replace").rstrip()[:_MAX_LINE]
                    if not line.strip():
                        continue
                    line = self._redact(line)
                    self._tail.append(line)
                    logger.info("MCP server %r: %s", self.server, line, extra={"mcp_server": self.server})
        except Exception:  # the log must never take the process down
            logger.warning("MCP server %r: its stderr could not be read", self.server)
        finally:
            self.closed.set()

    def last(self) -> str:
        """The last line the server wrote (empty when none yet)."""
        return self._tail[-1] if self._tail else ""

    def close_writer(self) -> None:
        """Close our copy of the write end: the reader ends once the server's copies are closed too."""
        try:
            self.writer.close()
        except OSError:
            pass
