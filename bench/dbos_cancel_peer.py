"""The peer of ``cancel_op.py``: DBOS's ``cancel_workflow`` on enqueued workflows, driven over stdin.

Runs in a virtualenv of its own with ``dbos`` installed (it is not a dependency of the
project); ``cancel_op.py`` starts it with ``--dbos-python``. Usage (one command a line)::

    python dbos_cancel_peer.py SYSTEM_DATABASE_URL N   # prints "ready" once N workflows wait in a queue
    cancel K                                           # cancels the next K, prints their timings (JSON, s)
    quit

The queue runs one workflow at a time and its first workflow blocks until the end, so the
others stay ``ENQUEUED``: the DBOS counterpart of a queued run.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from dbos import DBOS

release = threading.Event()


@DBOS.workflow()
def blocker() -> None:
    release.wait(600)


@DBOS.workflow()
def work() -> None:  # never runs: it is cancelled while enqueued
    pass


def main() -> None:
    url, count = sys.argv[1], int(sys.argv[2])
    DBOS(config={"name": "nrllm-bench-peer", "system_database_url": url, "log_level": "WARNING"})
    DBOS.launch()
    queue = DBOS.register_queue("bench", global_concurrency=1)
    queue.enqueue(blocker)
    handles = [queue.enqueue(work) for _ in range(count)]
    ids = [h.get_workflow_id() for h in handles]
    print("ready", flush=True)
    for line in sys.stdin:
        command = line.split()
        if not command or command[0] == "quit":
            break
        timings = []
        for _ in range(int(command[1])):
            workflow_id = ids.pop()
            t0 = time.perf_counter()
            DBOS.cancel_workflow(workflow_id)
            timings.append(time.perf_counter() - t0)
        print(json.dumps(timings), flush=True)
    release.set()
    DBOS.destroy(workflow_completion_timeout_sec=0)


if __name__ == "__main__":
    main()
