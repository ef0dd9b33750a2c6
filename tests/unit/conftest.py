"""The unit tier opens no socket and starts no process: each test runs with both refused.

A test that needs a server, a worker or a child process belongs to ``tests/integration`` or
``tests/e2e``. asyncio's own self-pipe (``socket.socketpair``) stays allowed: it never leaves the
process.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import socket
import subprocess

import pytest


class NotAUnitTest(AssertionError):
    """A unit test opened a socket or started a process; move it to the tier it is."""


def _refuse(what: str):
    def refused(*args, **kwargs):
        raise NotAUnitTest(f"a unit test may not {what}: move it to tests/integration or tests/e2e")

    return refused


@pytest.fixture(autouse=True)
def no_sockets_no_processes(monkeypatch):
    for name in ("connect", "connect_ex", "bind", "listen"):
        monkeypatch.setattr(socket.socket, name, _refuse(f"open a socket ({name})"))
    monkeypatch.setattr(socket, "create_connection", _refuse("open a socket (create_connection)"))
    monkeypatch.setattr(socket, "getaddrinfo", _refuse("resolve a host name"))
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse("start a process"))
    monkeypatch.setattr(os, "fork", _refuse("fork"))
    monkeypatch.setattr(os, "posix_spawn", _refuse("start a process"))
    monkeypatch.setattr(multiprocessing.Process, "start", _refuse("start a process"))
    monkeypatch.setattr(asyncio, "create_subprocess_exec", _refuse("start a process"))
    yield
