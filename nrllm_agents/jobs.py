"""The name of the job on the queue: every RQ job an executor enqueues names
``nrllm_agents.jobs.execute_run`` (``executors.rq_queue.JOB_FUNCTION``), and jobs already queued
keep that name across upgrades, so the path stays here whatever folder the job lives in."""

from __future__ import annotations

from .workers.jobs import execute_run

__all__ = ["execute_run"]
