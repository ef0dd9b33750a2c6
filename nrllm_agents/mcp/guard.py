"""Starts a stdio MCP server so that it cannot outlive the process that started it.

Run as a script (``python guard.py PARENT_PID -- COMMAND ARGS...``), never imported by the
package: it is the process the MCP SDK spawns, in a process group of its own. It asks the
kernel for SIGTERM when its parent thread dies (``PR_SET_PDEATHSIG``: a SIGKILLed worker
included), starts the server in its group, and on SIGTERM, or once the server has exited, or
once its parent is gone, ends every other process of the group: SIGTERM, then SIGKILL after a
grace period. Standard input and output are the server's own (inherited), so the SDK talks to
the server directly.
"""

import ctypes
import os
import signal
import subprocess
import sys
import time

PR_SET_PDEATHSIG = 1
GRACE_SECONDS = 2.0
POLL_SECONDS = 0.05


def _others() -> list[int]:
    """The other live processes of this process group (Linux ``/proc``; zombies excluded)."""
    me, group, found = os.getpid(), os.getpgrp(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == group:
            found.append(int(entry))
    return found


def _end_group(code: int) -> None:
    """SIGTERM every other member of the group, SIGKILL what is left after the grace; exit."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    others = _others()
    for pid in others:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + GRACE_SECONDS
    while others and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
        _reap()
        others = _others()
    for pid in others:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    os._exit(code)


def _reap() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def main(argv: list[str]) -> None:
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("usage: guard.py PARENT_PID -- COMMAND [ARGS...]\n")
        os._exit(2)
    parent = int(argv[1])
    signal.pthread_sigmask(signal.SIG_SETMASK, [])  # whatever the spawning thread blocked
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # an inherited SIG_IGN would hide the server's exit
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # not Linux: the parent watch below and the SDK's own shutdown remain
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)
    signal.signal(signal.SIGTERM, lambda signum, frame: _end_group(143))
    try:
        child = subprocess.Popen(argv[3:])
    except OSError as exc:
        sys.stderr.write(f"cannot start the MCP server {argv[3]!r}: {exc.strerror}\n")
        os._exit(127)
    while True:  # the server's exit, or the parent's (should the kernel's signal not come)
        try:
            pid, status = os.waitpid(child.pid, os.WNOHANG)
        except ChildProcessError:
            _end_group(0)
        if pid:
            _end_group(os.waitstatus_to_exitcode(status) & 0xFF)
        if os.getppid() != parent:
            _end_group(143)
        time.sleep(POLL_SECONDS * 4)


if __name__ == "__main__":
    main(sys.argv)
