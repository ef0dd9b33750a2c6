"""The process's listening connection (``live/listener.py``) against the real PostgreSQL."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from nrllm_agents.live.listener import IDLE_WAIT, Client, Listener, raw_connection

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres_only]
CHANNEL = "nrllm_test_listener"


class Recorder(Client):
    """Notes when each notification reaches it; the first one makes it run a slow statement on
    the listening connection, as a cancel's row check does."""

    channels = (CHANNEL,)

    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}
        self.up = threading.Event()
        self.busy = threading.Event()  # the first one's slow statement is about to run
        self.second = threading.Event()

    def state(self, up: bool) -> None:
        if up:
            self.up.set()

    def notified(self, conn: psycopg.Connection, batch: list[psycopg.Notify]) -> None:
        for n in batch:
            if n.channel != CHANNEL:
                continue
            self.arrived[n.payload] = time.monotonic()
            if n.payload == "first":
                self.busy.set()
                conn.execute("SELECT pg_sleep(0.4)")
            else:
                self.second.set()


def test_a_notification_that_arrives_during_a_client_s_statement_is_delivered_when_it_ends():
    """psycopg reads a notification that arrives while another statement runs on the listening
    connection; the socket then has nothing left to wake ``select``. It used to wait for the
    next tick (up to a second), which is what delayed a cancel arriving just after another."""
    listener, recorder = Listener(), Recorder()
    listener.add(recorder)
    listener.ensure_running()
    try:
        assert recorder.up.wait(10), "the listener did not connect"
        with raw_connection("nrllm-test-notifier") as notifier:
            notifier.execute(f"NOTIFY {CHANNEL}, 'first'")
            assert recorder.busy.wait(10), "the first notification never arrived"
            sent = time.monotonic()  # the second lands while the first's statement runs (0.4 s)
            notifier.execute(f"NOTIFY {CHANNEL}, 'second'")
        assert recorder.second.wait(10), "the second notification never arrived"
        assert "first" in recorder.arrived and recorder.arrived["first"] < sent
        assert recorder.arrived["second"] - sent < IDLE_WAIT / 2, recorder.arrived["second"] - sent
    finally:
        listener.stop()
