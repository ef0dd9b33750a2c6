"""manage.py agent_reap: recover runs whose worker died (expired lease)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from nrllm_agents import dispatch
from nrllm_agents.runtime import AgentRuntime


class Command(BaseCommand):
    help = ("Cancel overdue runs that nothing is executing (deadline_exceeded: queued, or running with an "
            "expired lease). Then requeue running runs whose lease expired (their worker died), or "
            "dead-letter them when their requeue budget is used or a non-idempotent tool was in flight. "
            "Safe to run on a schedule (cron, rq-scheduler) and concurrently with live workers: a run "
            "that renews its lease meanwhile is left alone.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--limit", type=int, default=100, help="At most this many runs per pass (default 100).")
        parser.add_argument("--dry-run", action="store_true", help="Report what would be done; change nothing.")

    def handle(self, *args: Any, limit: int, dry_run: bool, **options: Any) -> None:
        if limit < 1:
            raise CommandError("--limit must be a positive integer", returncode=2)
        report = AgentRuntime().reap(limit=limit, dry_run=dry_run)
        if report.requeued and not dry_run and not dispatch.uses_redis():
            # Embedded default: requeued runs execute in this process; let them finish.
            dispatch.wait_local_idle(timeout=3600)
        self.stdout.write(self.style.SUCCESS(report.summary()))
