"""``manage.py agent_run``: start an agent run and stream its steps."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from nrllm_agents.access.policy import UseRefused
from nrllm_agents.admission.budgets import BudgetRefused
from nrllm_agents.executors.dispatch import EnqueueError, uses_rq
from nrllm_agents.management import console, terminal
from nrllm_agents.runtime import threads
from nrllm_agents.runtime.agent_runtime import AgentRuntime, RunNotFound
from nrllm_agents.validation.run_request import InvalidRequest, RunRequest


class Command(BaseCommand):
    help = (
        "Start an agent run. By default it runs in this process and prints each step as it is "
        "recorded, and the model's answer as it is written; Ctrl-C cancels it and interrupts the "
        "step in flight (twice: exit at once). With --queued "
        "a worker runs it. With --thread the prompt is a message of that thread: its run is queued "
        "behind the thread's runs (--multitask says what happens while one is active) and followed. "
        "Exit status: 0 completed, 3 cancelled, 4 awaiting approval, 1 failed (or a busy thread "
        "refused the message), 2 usage error (or the --owner may not use the agent or connection)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("prompt", metavar="PROMPT", help="What the agent should do.")
        parser.add_argument("--provider", help="Model provider (default: the configured default, 'scripted').")
        parser.add_argument("--model", help="Model name passed to the provider (default: the connection's).")
        parser.add_argument(
            "--connection", metavar="NAME", help="Run through this connection (see agent_connections list)."
        )
        parser.add_argument(
            "--agent",
            metavar="NAME",
            help="Start from this agent's latest version: its definition fills every flag not given.",
        )
        parser.add_argument(
            "--tool",
            dest="tools",
            action="append",
            metavar="NAME",
            help="Offer this tool to the model; repeat for several (default: the configured tools).",
        )
        parser.add_argument(
            "--script", metavar="JSON|@FILE", help="Turns for the scripted provider, as JSON or @path to a JSON file."
        )
        parser.add_argument("--max-iterations", type=int, metavar="N", help="Cap on model calls for this run.")
        console.add_limit_arguments(parser)
        console.add_owner_argument(parser)
        parser.add_argument("--json", action="store_true", help="Print one JSON object per line.")
        parser.add_argument(
            "--queued",
            action="store_true",
            help="Hand the run to its executor (RQ workers, or threads of this process) and print its id at once.",
        )
        parser.add_argument(
            "--follow",
            action="store_true",
            help="With --queued: tail the stream until the run ends or waits for approval, "
            "and exit with the run's exit status.",
        )

        parser.add_argument(
            "--thread",
            metavar="ID",
            help="Post the prompt as a message of this thread (see agent_threads); its run continues "
            "the thread's transcript. Followed unless --queued is given without --follow.",
        )
        parser.add_argument(
            "--multitask",
            choices=threads.STRATEGIES,
            metavar="STRATEGY",
            help="With --thread, while a run of the thread is active: reject, enqueue, interrupt or rollback "
            "(default: the configured one, enqueue).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            self._handle(options)
        except (BudgetRefused, UseRefused) as exc:  # nothing was started: the API's 429 or 403's words (exit 2)
            raise console.usage_error(str(exc)) from None

    def _handle(self, options: dict[str, Any]) -> None:
        if options["multitask"] and not options["thread"]:
            raise console.usage_error("--multitask goes with --thread")
        if options["thread"] is not None:
            code = self._message(options)
            if code:
                sys.exit(code)
            return
        if options["follow"] and not options["queued"]:
            raise console.usage_error("--follow goes with --queued (an interactive run always streams)")
        request = self._request(options)
        owner = console.owner_arg(options["owner"])
        runtime = AgentRuntime()
        printer = terminal.StreamPrinter(self.stdout, self.style, as_json=options["json"])
        if options["queued"]:
            code = self._queued(runtime, request, printer, owner, follow=options["follow"])
        else:
            code = self._interactive(runtime, request, printer, owner)
        if code:
            sys.exit(code)

    def _message(self, options: dict[str, Any]) -> int:
        try:
            thread_id = threads.parse_thread_id(options["thread"])
        except threads.ThreadNotFound:
            raise console.usage_error(f"--thread: not a thread id: {str(options['thread'])[:80]!r}") from None
        request = self._request(options)
        runtime = AgentRuntime()
        printer = terminal.StreamPrinter(self.stdout, self.style, as_json=options["json"])
        try:
            run_id = runtime.post(
                thread_id, request, owner=console.owner_arg(options["owner"]), strategy=options["multitask"]
            )
        except threads.ThreadNotFound:
            raise console.usage_error(f"--thread: no thread {thread_id}") from None
        except threads.ThreadBusy as exc:
            raise CommandError(console.terminal_safe(str(exc)), returncode=console.EXIT_FAILED) from None
        except EnqueueError as exc:
            raise console.enqueue_failed(exc) from None
        printer.started(run_id, f" queued in thread {thread_id}")
        terminal.stderr_hint(self.stderr, run_id)
        if options["queued"] and not options["follow"]:
            return console.EXIT_OK
        return self._follow(runtime, run_id, printer)

    def _follow(self, runtime: AgentRuntime, run_id: Any, printer: terminal.StreamPrinter) -> int:
        try:
            run = terminal.follow(runtime, run_id, on_step=printer.step, on_delta=printer.delta)
        except KeyboardInterrupt:
            raise terminal.interrupted_follow(run_id) from None
        except RunNotFound:  # deleted while we watched
            raise CommandError(
                f"run {run_id} disappeared while being followed", returncode=console.EXIT_FAILED
            ) from None
        return printer.summary(run)

    def _request(self, options: dict[str, Any]) -> RunRequest:
        data: dict[str, Any] = {"prompt": options["prompt"], **console.request_options(options)}
        if options["script"] is not None:
            data["script"] = console.parse_script(options["script"])
        try:
            return RunRequest.from_mapping(data)
        except InvalidRequest as exc:
            raise console.request_error(exc) from None

    def _interactive(
        self, runtime: AgentRuntime, request: RunRequest, printer: terminal.StreamPrinter, owner: Any
    ) -> int:
        with terminal.CancelOnInterrupt(runtime, self.stderr) as interrupt:

            def on_step(step: dict[str, Any]) -> None:
                if printer.run_id is None:  # the first step names the run: announce it first
                    printer.started(step["run_id"])
                    terminal.stderr_hint(self.stderr, step["run_id"])
                    interrupt.set_run_id(step["run_id"])
                printer.step(step)

            result = runtime.run(request, owner=owner, on_step=on_step, on_delta=printer.delta)
        if printer.run_id is None:  # no step was recorded (cannot happen today, but say the id anyway)
            printer.started(result.run_id)
        return printer.summary(runtime.status(result.run_id))

    def _queued(
        self, runtime: AgentRuntime, request: RunRequest, printer: terminal.StreamPrinter, owner: Any, *, follow: bool
    ) -> int:
        try:
            queued = runtime.submit(request, owner=owner)
        except EnqueueError as exc:
            raise console.enqueue_failed(exc) from None
        run_id = queued.run_id
        printer.started(run_id, " queued")
        terminal.waiting_for_queue(self.stderr, queued)
        terminal.stderr_hint(self.stderr, run_id)
        if not uses_rq() and not follow:
            # The embedded executor lives in this process: it finishes the run before we exit.
            self.stderr.write("in-process executor: the run executes in this process, which exits when it is done")
        if not follow:
            return console.EXIT_OK
        return self._follow(runtime, run_id, printer)
