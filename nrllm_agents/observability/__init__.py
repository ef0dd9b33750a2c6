"""Operating runs: Prometheus metrics, structured logs, and the pictures of runs and operations.

- ``metrics``: the counters and histograms (``prometheus-client``, multiprocess-aware);
- ``collectors``: gauges read from the database and the queue at scrape time;
- ``hooks``: the one-line calls the runtime, the segment and the store make (count and log);
- ``logs``: the logging configuration (JSON or text) and the run context on every record;
- ``views``: ``GET /metrics``; ``gantt``: a run's steps as an SVG strip; ``operations``: the
  admin's operations page data.

Importing this package imports nothing else: settings import ``logs`` before Django is set up.
"""
