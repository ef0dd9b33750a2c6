"""manage.py agent_reap: recover runs whose worker died (expired lease), and queued runs whose
job is gone (``recovery.sweep_queued``)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from nrllm_agents import executors
from nrllm_agents.conf import DEFAULTS
from nrllm_agents.executors import recovery
from nrllm_agents.management import console
from nrllm_agents.runtime.agent_runtime import AgentRuntime

MAX_LIMIT = 100_000  # runs one pass may take on


class Command(BaseCommand):
    help = (
        "Cancel overdue runs that nothing is executing (deadline_exceeded: queued, or running with an "
        "expired lease). Then requeue running runs whose lease expired (their worker died), or "
        "dead-letter them when their requeue budget is used; one lost during a non-idempotent tool "
        "call is requeued in doubt, to wait for a person's decision (NRLLM_IN_DOUBT=fail: dead-lettered). "
        "Safe to run on a schedule (cron, rq-scheduler) and concurrently with live workers: a run "
        "that renews its lease meanwhile is left alone. Then dispatches again queued runs older than "
        f"NRLLM_QUEUED_STALE_SECONDS (default {DEFAULTS['QUEUED_STALE_SECONDS'].default:g}) that have no job "
        "in the queue (Redis flushed, queue "
        "emptied, a job lost)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--limit",
            type=int,
            default=100,
            help="At most this many runs per pass (default 100).",
        )
        parser.add_argument("--dry-run", action="store_true", help="Report what would be done; change nothing.")

    def handle(self, *args: Any, limit: int, dry_run: bool, **options: Any) -> None:
        if not 1 <= limit <= MAX_LIMIT:
            raise console.usage_error(f"--limit must be a positive integer, at most {MAX_LIMIT:,}")
        report = AgentRuntime().reap(limit=limit, dry_run=dry_run)
        sweep = recovery.sweep_queued(limit=limit, dry_run=dry_run)
        if (report.requeued or sweep.recovered) and not dry_run:
            # The in-process executor runs them in this process: let them finish (RQ: at once).
            executors.chosen().wait_idle(timeout=3600)
        self.stdout.write(self.style.SUCCESS(report.summary()))
        self.stdout.write((self.style.WARNING if sweep.error else self.style.SUCCESS)(sweep.summary()))
        if sweep.error:
            raise CommandError(f"the queue could not be asked: {sweep.error}", returncode=1)
