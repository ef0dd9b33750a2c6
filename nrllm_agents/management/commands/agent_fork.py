"""``manage.py agent_fork``: continue a stopped run from one of its steps, as a new run."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from nrllm_agents.access.policy import UseRefused
from nrllm_agents.admission.budgets import BudgetRefused
from nrllm_agents.executors.dispatch import EnqueueError
from nrllm_agents.management import console, terminal
from nrllm_agents.runtime.agent_runtime import AgentRuntime, RunNotFound
from nrllm_agents.runtime.forks import NotForkable
from nrllm_agents.validation.run_request import InvalidRequest


class Command(BaseCommand):
    help = (
        "Fork a cancelled, failed or completed run: a NEW run whose transcript is the run's up to and "
        "including step N (default: the last step before it was cancelled), with every unanswered tool "
        "call answered. The run itself is not changed. Runs here, streaming like agent_run (Ctrl-C "
        "cancels the fork), or in a worker with --queued. Exit status: 0 completed, 3 cancelled, "
        "4 awaiting approval, 1 failed or not found or not stopped, 2 usage error."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id", metavar="RUN_ID", help="Id (UUID) of the run to fork.")
        parser.add_argument(
            "--from", dest="from_sequence", type=int, metavar="N", help="Continue from step N (its sequence, included)."
        )
        parser.add_argument("--provider", help="Override the parent's model provider.")
        parser.add_argument("--model", help="Override the parent's model name.")
        parser.add_argument(
            "--tool",
            dest="tools",
            action="append",
            metavar="NAME",
            help="Offer this tool instead of the parent's; repeat for several.",
        )
        parser.add_argument("--script", metavar="JSON|@FILE", help="Override the scripted provider's turns.")
        parser.add_argument("--max-iterations", type=int, metavar="N", help="Override the cap on model calls.")
        parser.add_argument("--connection", metavar="NAME", help="Override the connection the fork runs through.")
        parser.add_argument(
            "--agent",
            metavar="NAME",
            help="Continue as this agent (its latest version) instead of the parent's settings.",
        )
        console.add_limit_arguments(parser)
        console.add_owner_argument(parser)
        parser.add_argument("--json", action="store_true", help="Print one JSON object per line.")
        parser.add_argument("--queued", action="store_true", help="Hand the fork to a worker; print its id at once.")
        parser.add_argument(
            "--follow", action="store_true", help="With --queued: tail the fork's stream until it ends."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        parent = console.run_id_arg(options["run_id"])
        if options["follow"] and not options["queued"]:
            raise console.usage_error("--follow goes with --queued (a fork run here always streams)")
        overrides = console.request_options(options)
        if options["script"] is not None:
            overrides["script"] = console.parse_script(options["script"])
        owner = console.owner_arg(options["owner"])
        runtime = AgentRuntime()
        printer = terminal.StreamPrinter(self.stdout, self.style, as_json=options["json"])
        try:
            if options["queued"]:
                result = runtime.fork(parent, from_sequence=options["from_sequence"], overrides=overrides, owner=owner)
                printer.started(result.run_id, f" queued (a fork of {parent})")
                terminal.waiting_for_queue(self.stderr, result)
                code = self._follow(runtime, result.run_id, printer) if options["follow"] else console.EXIT_OK
            else:
                code = self._here(runtime, parent, options["from_sequence"], overrides, printer, owner)
        except InvalidRequest as exc:
            raise console.request_error(exc) from None
        except (BudgetRefused, UseRefused) as exc:  # nothing was started (exit 2)
            raise console.usage_error(str(exc)) from None
        except (RunNotFound, NotForkable) as exc:
            raise CommandError(str(exc), returncode=console.EXIT_FAILED) from None
        except EnqueueError as exc:
            raise console.enqueue_failed(exc) from None
        if code:
            sys.exit(code)

    def _here(
        self,
        runtime: AgentRuntime,
        parent: Any,
        from_sequence: int | None,
        overrides: dict[str, Any],
        printer: terminal.StreamPrinter,
        owner: Any,
    ) -> int:
        with terminal.CancelOnInterrupt(runtime, self.stderr) as interrupt:

            def on_step(step: dict[str, Any]) -> None:
                if printer.run_id is None:  # the forked step names the new run
                    printer.started(step["run_id"], f" (a fork of {parent})")
                    terminal.stderr_hint(self.stderr, step["run_id"])
                    interrupt.set_run_id(step["run_id"])
                printer.step(step)

            result = runtime.fork(
                parent, from_sequence=from_sequence, overrides=overrides, queued=False, on_step=on_step, owner=owner
            )
        return printer.summary(runtime.status(result.run_id))

    def _follow(self, runtime: AgentRuntime, run_id: Any, printer: terminal.StreamPrinter) -> int:
        try:
            run = terminal.follow(runtime, run_id, on_step=printer.step)
        except KeyboardInterrupt:
            raise terminal.interrupted_follow(run_id) from None
        return printer.summary(run)
