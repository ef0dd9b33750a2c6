"""Starts a stdio MCP server so that it cannot outlive the process that started it.

Run as a script (``python guard.py PARENT_PID -- COMMAND ARGS...``), never imported by the
package: it is the process the MCP SDK spawns, in a process group of its own. It asks the
kernel for SIGTERM when its parent thread dies (``PR_SET_PDEATHSIG``: a SIGKILLed worker
included), starts the server in its group, and on SIGTERM, or once the server has exited,
ends every process of the group: SIGTERM, then SIGKILL after a grace period. Standard input
and output are the server's own (inherited), so the SDK talks to the server directly.
"""

import ctypes
import os
import signal
import subprocess
import sys

PR_SET_PDEATHSIG = 1
GRACE_SECONDS = 2.0


def _end_group(child: "subprocess.Popen[bytes] | None", code: int) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    group = os.getpgrp()
    try:
        os.killpg(group, signal.SIGTERM)
    except OSError:
        pass
    if child is not None:
        try:
            child.wait(GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            pass
    alive = True
    try:
        os.killpg(group, 0)
    except OSError:
        alive = False
    if alive and child is not None and child.poll() is None:
        os.killpg(group, signal.SIGKILL)  # the guard goes too: nothing of the group is left
    os._exit(code)


def main(argv: list[str]) -> None:
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("usage: guard.py PARENT_PID -- COMMAND [ARGS...]\n")
        os._exit(2)
    parent = int(argv[1])
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # not Linux: the SDK's own shutdown (stdin, SIGTERM, SIGKILL to the group) remains
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)
    child = None
    signal.signal(signal.SIGTERM, lambda signum, frame: _end_group(child, 143))
    try:
        child = subprocess.Popen(argv[3:])
    except OSError as exc:
        sys.stderr.write(f"cannot start the MCP server {argv[3]!r}: {exc.strerror}\n")
        os._exit(127)
    code = child.wait()
    _end_group(None, code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main(sys.argv)
