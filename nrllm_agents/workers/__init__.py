"""The processes that execute queued runs: the job an executor calls (``jobs``), the forking RQ
worker (``rq_worker``), the threaded worker (``threaded``), and what every worker does on the
side (``maintenance``, ``outages``, ``warm``)."""
