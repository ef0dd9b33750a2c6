"""``manage.py agent_cancel``: cancel runs by id, or in bulk by status and age."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from nrllm_agents.management import console
from nrllm_agents.models import AgentRun, CancelSource, RunStatus
from nrllm_agents.presentation.outcomes import bulk_wording, cancel_wording
from nrllm_agents.runtime.agent_runtime import AgentRuntime, CancelOutcome, CancelResult
from nrllm_agents.store import reason_problem


class Command(BaseCommand):
    help = (
        "Cancel agent runs. A run that is executing is interrupted: its step in flight is recorded, "
        "then it stops; a queued or "
        "waiting run stops at once; a finished run is left unchanged. Give run ids, or select runs "
        "with --status / --older-than (with --dry-run to only count them). Exit status: 0 when every "
        "given run is cancelled (now or before), 1 when any was not found or had already completed "
        "or failed, 2 for a malformed id or no selection."
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.requires_system_checks = console.checks_without_web()  # a cancel serves no web request
        super().__init__(*args, **kwargs)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_ids", nargs="*", metavar="RUN_ID", help="Ids (UUIDs) of the runs to cancel.")
        parser.add_argument("--reason", default="", help="Why; stored on the run and in its cancelled step.")
        parser.add_argument(
            "--by",
            metavar="NAME",
            help="Who cancels, recorded on the run and its cancelled step: a site user's username, or any "
            "operator name (default: the OS user, $SUDO_USER under sudo).",
        )
        parser.add_argument("--json", action="store_true", help="Print one JSON object per line.")
        parser.add_argument(
            "--status",
            action="append",
            metavar="STATUS",
            help=f"Bulk: select runs with this status; repeatable ({', '.join(RunStatus.values)}).",
        )
        parser.add_argument(
            "--older-than",
            metavar="DURATION",
            help="Bulk: select runs created more than this long ago (30s, 15m, 2h, 7d).",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Bulk: report what would be cancelled and change nothing."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        reason = options["reason"] or ""
        problem = reason_problem(reason)
        if problem is not None:
            raise console.usage_error(f"--reason: {problem}")
        bulk = options["status"] is not None or options["older_than"] is not None
        if options["run_ids"] and (bulk or options["dry_run"]):
            raise console.usage_error("give run ids, or select runs with --status / --older-than [--dry-run]; not both")
        if bulk:
            self._bulk(options, reason)
        elif options["dry_run"]:
            raise console.usage_error("--dry-run needs a selection: --status and/or --older-than")
        elif not options["run_ids"]:
            raise console.usage_error("give at least one run id, or select runs with --status / --older-than")
        else:
            self._by_id(options, reason)

    def _by_id(self, options: dict[str, Any], reason: str) -> None:
        # Every id is checked before anything is written: one malformed id changes nothing.
        run_ids = list(dict.fromkeys(console.run_id_arg(value) for value in options["run_ids"]))
        runtime = AgentRuntime()
        by = console.operator(options["by"])
        results = [runtime.cancel(run_id, by=by, source=CancelSource.CLI, reason=reason) for run_id in run_ids]
        for result in results:
            self._report(result, options["json"])
        refused = [r for r in results if r.outcome in (CancelOutcome.NOT_FOUND, CancelOutcome.ALREADY_FINISHED)]
        if refused:
            missing = sum(r.outcome == CancelOutcome.NOT_FOUND for r in refused)
            raise CommandError(
                f"{len(refused)} of {len(results)} runs not cancelled "
                f"({missing} not found, {len(refused) - missing} already finished)",
                returncode=console.EXIT_FAILED,
            )

    def _report(self, result: CancelResult, as_json: bool) -> None:
        if as_json:
            self.stdout.write(
                json.dumps(
                    {
                        "event": "cancel",
                        "run_id": str(result.run_id),
                        "outcome": result.outcome.value,
                        "status": result.status,
                        "previous_status": result.previous_status,
                        "stops_at_next_boundary": result.was_executing,
                    }
                )
            )
            return
        wording = cancel_wording(result)
        style = self.style.SUCCESS if wording.changed else self.style.ERROR if wording.refused else self.style.WARNING
        self.stdout.write(wording.sentence(result.run_id), style)

    def _bulk(self, options: dict[str, Any], reason: str) -> None:
        selection = AgentRun.objects.all()
        if options["status"] is not None:
            unknown = sorted(set(options["status"]) - set(RunStatus.values))
            if unknown:
                raise console.usage_error(
                    f"--status: unknown {', '.join(unknown)}; one of {', '.join(RunStatus.values)}"
                )
            selection = selection.filter(status__in=options["status"])
        if options["older_than"] is not None:
            selection = selection.filter(created_at__lt=console.created_before(options["older_than"]))
        done = AgentRuntime().cancel_many(
            selection,
            by=console.operator(options["by"]),
            source=CancelSource.CLI,
            reason=reason,
            dry_run=options["dry_run"],
        )
        if options["json"]:
            self.stdout.write(
                json.dumps(
                    {
                        "event": "bulk_cancel",
                        "dry_run": done.dry_run,
                        "cancelled_total": done.cancelled_total,
                        "cancelled": done.cancelled,
                        "unchanged": done.unchanged,
                    }
                )
            )
            return
        wording = bulk_wording(done)
        self.stdout.write(wording.text, self.style.SUCCESS if wording.changed else self.style.WARNING)
