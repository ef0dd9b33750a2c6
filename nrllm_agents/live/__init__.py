"""What happens while a run executes, pushed as it happens. ``listener`` owns the process's one
listening connection; its clients are the cancel watcher (``interrupts``), the hub that pushes
steps to watchers (``push``, read through ``watch``) and the publisher of steps and deltas
(``deltas``)."""

from __future__ import annotations


def install() -> None:
    """Wire this process's live clients, called once by the app's ``ready()``.

    The cancel watcher is the listener's first client, so cancels are routed before any other
    client's work; the publisher hears of every boundary the store records.
    """
    from ..store import leases
    from .deltas import publisher
    from .interrupts import watcher
    from .listener import listener
    from .push import hub

    listener.add(watcher)
    listener.add(hub)
    listener.add(publisher)
    leases.on_boundary = publisher.boundary
