"""manage.py agent_retention: apply the retention policy now (``NRLLM_AGENTS["RETENTION"]``)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from nrllm_agents.runtime.agent_runtime import AgentRuntime
from nrllm_agents.store import retention


class Command(BaseCommand):
    help = (
        'Apply NRLLM_AGENTS["RETENTION"] now: delete stopped runs (with their trees) finished more than '
        "runs_days ago, then purge the content of stopped runs finished more than content_days ago, "
        "keeping their audit skeleton. Runs still moving are never touched. Every worker's maintenance "
        "pass does the same in small batches; this command goes until nothing is due."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="Report what is due; change nothing.")

    def handle(self, *args: Any, dry_run: bool, **options: Any) -> None:
        chosen = retention.policy()
        if not chosen.active:
            raise CommandError(
                'no retention policy: set NRLLM_AGENTS["RETENTION"] content_days or runs_days', returncode=1
            )
        report = AgentRuntime().retain(dry_run=dry_run)
        self.stdout.write(self.style.SUCCESS(f"{report.summary()} (policy: {chosen.describe()})"))
