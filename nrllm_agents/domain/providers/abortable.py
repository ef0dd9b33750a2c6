"""An HTTP client whose calls in flight can be aborted from another thread.

A model call blocks its thread in a socket read. Closing an HTTP client from another thread does
not wake such a read; shutting the socket down does, at once, and the server sees the disconnect
and stops generating. This module gives the ``openai`` SDK an HTTP client whose transport
remembers the sockets it opened, so that ``AbortableHttp.abort()`` can shut them down.

The transport is taken from whichever ``httpx`` flavour the SDK's default client is built on; its
pool takes a network backend (a documented ``httpcore`` hook). ``_pool`` is the one private name
used: without it ``abort()`` falls back to closing the client, which still stops the stream at its
next chunk. The client also carries the trace context of the call in flight: ``carry(headers)``
names the headers (W3C ``traceparent``) a request hook adds to every request of that call.
"""

from __future__ import annotations

import logging
import socket
import sys
import threading
import weakref
from collections.abc import Mapping
from typing import Any

logger = logging.getLogger(__name__)


def _httpx_module(client_class: type) -> Any:
    """The ``httpx``-like module a client class derives from (``httpx`` or ``httpx2``)."""
    for base in client_class.__mro__:
        root = base.__module__.split(".", 1)[0]
        if root.startswith("httpx") and base.__name__ == "Client":
            return sys.modules[root]
    raise RuntimeError(f"{client_class!r} is not built on an httpx client")


class _TrackingBackend:
    """Wraps an ``httpcore`` network backend and hands the sockets it connects to its owner."""

    def __init__(self, inner: Any, owner: AbortableHttp) -> None:
        self._inner = inner
        self._owner = owner

    def connect_tcp(self, *args: Any, **kwargs: Any) -> Any:
        stream = self._inner.connect_tcp(*args, **kwargs)
        self._remember(stream)
        return stream

    def connect_unix_socket(self, *args: Any, **kwargs: Any) -> Any:
        stream = self._inner.connect_unix_socket(*args, **kwargs)
        self._remember(stream)
        return stream

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)

    def _remember(self, stream: Any) -> None:
        sock = stream.get_extra_info("socket")
        if isinstance(sock, socket.socket):
            self._owner._remember(sock)


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed


class AbortableHttp:
    """An SDK-compatible HTTP client plus ``abort()``, which cuts every call in flight.

    One instance serves one provider, i.e. one run's sequential model calls, so the sockets
    it holds are that run's alone.
    """

    def __init__(self, client_class: type, **client_options: Any) -> None:
        module = _httpx_module(client_class)
        self._sockets: weakref.WeakSet[socket.socket] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._aborted = False
        self._headers: Mapping[str, str] = {}
        transport = module.HTTPTransport()
        pool = getattr(transport, "_pool", None)
        self.tracking = pool is not None and hasattr(pool, "_network_backend")
        if pool is not None and self.tracking:
            pool._network_backend = _TrackingBackend(pool._network_backend, self)
        else:
            logger.warning("the HTTP transport offers no network backend hook; a cancel closes the client instead")
        self.client = client_class(transport=transport, event_hooks={"request": [self._carry]}, **client_options)

    def arm(self) -> None:
        """A call starts: connections are allowed again (until the next ``abort``)."""
        with self._lock:
            self._aborted = False

    def carry(self, headers: Mapping[str, str]) -> None:
        """The requests of the call that starts carry ``headers`` (its trace context; none
        when nothing traces)."""
        self._headers = headers

    def _carry(self, request: Any) -> None:
        for name, value in self._headers.items():
            request.headers[name] = value

    def abort(self) -> None:
        """Shut down every socket this client opened, and any it opens before the next ``arm``
        (a cancel that lands between the call's start and its connect); a blocked read returns
        at once."""
        with self._lock:
            self._aborted = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shutdown(sock)
        if not self.tracking:
            self.client.close()

    def _remember(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.add(sock)
            cut = self._aborted
        if cut:
            _shutdown(sock)

    def close(self) -> None:
        self.client.close()
