"""``manage.py agent_events``: print a run's recorded step stream, optionally following it."""

from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from nrllm_agents.management import console, terminal
from nrllm_agents.presentation import presenters, trees
from nrllm_agents.runtime.agent_runtime import AgentRuntime, RunNotFound
from nrllm_agents.store import MAX_SEQUENCE


class Command(BaseCommand):
    help = (
        "Print the recorded steps of a run, then a summary of its status. With --follow, keep "
        "printing new steps until the run ends or waits for approval, and exit with the run's exit "
        "status (0 completed, 3 cancelled, 4 awaiting approval, 1 failed); without it, exit 0. "
        "1 when the run is not found, 2 usage error."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", metavar="RUN_ID", help="Id (UUID) of the run.")
        parser.add_argument(
            "--after",
            type=int,
            default=-1,
            metavar="N",
            help="Only steps whose sequence is greater than N (default -1: all).",
        )
        parser.add_argument(
            "--follow", action="store_true", help="Tail the stream until the run ends or waits for approval."
        )
        parser.add_argument("--json", action="store_true", help="Print one JSON object per line.")
        parser.add_argument(
            "--tree",
            action="store_true",
            help="Print the run's tree instead (it and its sub-agents' runs: status, tokens, cost).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        run_id = console.run_id_arg(options["run_id"])
        if not -1 <= options["after"] <= MAX_SEQUENCE:
            raise console.usage_error("--after: a sequence number, -1 or more")
        runtime = AgentRuntime()
        if options["tree"]:
            return self._tree(runtime, run_id, as_json=options["json"])
        printer = terminal.StreamPrinter(self.stdout, self.style, as_json=options["json"])
        try:
            run = runtime.status(run_id)
            printer.started(run_id, f" ({run.status})")
            if options["follow"]:
                run = terminal.follow(
                    runtime, run_id, after=options["after"], on_step=printer.step, on_delta=printer.delta
                )
            else:
                for event in runtime.events(run_id, after=options["after"]):
                    printer.step(presenters.event_dict(event))
                run = runtime.status(run_id)
        except RunNotFound as exc:
            raise CommandError(str(exc), returncode=console.EXIT_FAILED) from None
        except KeyboardInterrupt:
            raise terminal.interrupted_follow(run_id) from None
        code = printer.summary(run)
        if options["follow"] and code:
            sys.exit(code)

    def _tree(self, runtime: AgentRuntime, run_id: Any, *, as_json: bool) -> None:
        try:
            run = runtime.status(run_id)
        except RunNotFound as exc:
            raise CommandError(str(exc), returncode=console.EXIT_FAILED) from None
        for entry in trees.outline(run):
            if as_json:
                self.stdout.write(json.dumps(entry))
                continue
            agent = f" {entry['agent']}" if entry["agent"] else ""
            cost = f", cost {entry['cost']}" if entry["cost"] else ""
            line = f"{'  ' * (entry['depth'] - run.tree_depth)}{entry['run_id']}{agent} {entry['status']}"
            self.stdout.write(f"{line} ({entry['tokens']} tokens{cost})")
