"""``manage.py agent_approve``: decide on a waiting run (approve or deny its calls, or say whether
a call in doubt happened), and resume it."""

from __future__ import annotations

import sys
from typing import Any, NamedTuple

from django.core.management.base import BaseCommand, CommandError, CommandParser

from nrllm_agents.domain import jsonlimits
from nrllm_agents.executors.dispatch import EnqueueError
from nrllm_agents.management import console, terminal
from nrllm_agents.runtime.agent_runtime import (
    AgentRuntime,
    ApprovalAmbiguous,
    ApprovalNotPending,
    DecisionMismatch,
    RunNotFound,
)
from nrllm_agents.store import reason_problem
from nrllm_agents.validation.run_request import InvalidRequest


class Decided(NamedTuple):
    """The decision taken at this shell: approve or deny, or (``happened`` not ``None``) whether a
    call in doubt happened and its ``result``; who, why."""

    approve: bool
    by: Any
    reason: str
    happened: bool | None = None
    result: Any = None

    def take(self, runtime: AgentRuntime, run_id: Any, **kwargs: Any) -> Any:
        if self.happened is None:
            return runtime.approve(run_id, self.approve, by=self.by, reason=self.reason, **kwargs)
        return runtime.resolve(run_id, self.happened, result=self.result, by=self.by, reason=self.reason, **kwargs)

    @property
    def said(self) -> str:
        if self.happened is None:
            return "approved" if self.approve else "denied"
        return "it happened" if self.happened else "it did not happen"


class Command(BaseCommand):
    help = (
        "Approve or deny the pending tool calls of a run waiting for approval, or, for a call in doubt (its "
        "worker was lost during it), say whether it happened (--happened [--result JSON]: recorded as its "
        "result, not made again) or not (--not-happened: made again); then resume the run here, "
        "streaming its steps like agent_run (Ctrl-C cancels it), or in a worker with --queued. "
        "Exit status: 0 completed, 3 cancelled, 4 awaiting approval again, 1 failed or not awaiting "
        "approval or not found, 2 usage error."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "run_id",
            metavar="RUN_ID",
            help="Id (UUID) of the waiting run, or of a run above it in its tree (the root): the one run "
            "below it that waits for approval is decided.",
        )
        parser.add_argument(
            "--run",
            metavar="RUN_ID",
            help="In a tree where several runs below RUN_ID wait for approval: the one to decide.",
        )
        decision = parser.add_mutually_exclusive_group(required=True)
        decision.add_argument("--approve", action="store_true", help="Run the pending calls.")
        decision.add_argument("--deny", action="store_true", help="Refuse the pending calls; the model is told.")
        decision.add_argument(
            "--happened", action="store_true", help="A call in doubt did happen: --result is recorded as its result."
        )
        decision.add_argument(
            "--not-happened", action="store_true", help="A call in doubt did not happen: it is made again."
        )
        parser.add_argument(
            "--result", metavar="JSON", help="With --happened: what the call returned, as JSON (default null)."
        )
        parser.add_argument("--reason", default="", help="Why; recorded on the approval step.")
        parser.add_argument(
            "--by",
            metavar="NAME",
            help="Who decides, recorded on the approval step: a site user's username, or any operator "
            "name (default: the OS user, $SUDO_USER under sudo).",
        )
        parser.add_argument("--json", action="store_true", help="Print one JSON object per line.")
        parser.add_argument(
            "--queued", action="store_true", help="Store the decision and let a worker resume the run; exit at once."
        )
        parser.add_argument(
            "--follow", action="store_true", help="With --queued: tail the stream until the run ends or waits again."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        run_id = console.run_id_arg(options["run_id"])
        if options["follow"] and not options["queued"]:
            raise console.usage_error("--follow goes with --queued (a run resumed here always streams)")
        reason = options["reason"] or ""
        problem = reason_problem(reason)
        if problem is not None:
            raise console.usage_error(f"--reason: {problem}")
        happened = True if options["happened"] else False if options["not_happened"] else None
        result = None
        if options["result"] is not None:
            if not happened:
                raise console.usage_error("--result goes with --happened")
            try:
                result = jsonlimits.loads(options["result"])
            except jsonlimits.JSONRefused as exc:
                raise console.usage_error(f"--result: {exc}") from None
        decided = Decided(bool(options["approve"]), console.operator(options["by"]), reason, happened, result)
        runtime = AgentRuntime()
        printer = terminal.StreamPrinter(self.stdout, self.style, as_json=options["json"])
        try:
            target = runtime.approval_target(
                run_id, pick=console.run_id_arg(options["run"]) if options["run"] else None
            )
            if target != run_id:
                self.stdout.write(f"deciding the approval of run {target}, below run {run_id} in its tree")
                run_id = target
            if options["queued"]:
                code = self._queued(runtime, run_id, decided, printer, follow=options["follow"])
            else:
                code = self._here(runtime, run_id, decided, printer)
        except RunNotFound as exc:
            raise CommandError(str(exc), returncode=console.EXIT_FAILED) from None
        except (ApprovalNotPending, ApprovalAmbiguous, DecisionMismatch) as exc:
            raise CommandError(str(exc), returncode=console.EXIT_FAILED) from None
        except InvalidRequest as exc:  # a --result too large or too deep
            raise console.usage_error(str(exc)) from None
        except EnqueueError as exc:
            raise console.enqueue_failed(exc) from None
        if code:
            sys.exit(code)

    def _here(self, runtime: AgentRuntime, run_id: Any, decided: Decided, printer: terminal.StreamPrinter) -> int:
        with terminal.CancelOnInterrupt(runtime, self.stderr, run_id=run_id):
            announced = False

            def on_step(step: dict[str, Any]) -> None:
                nonlocal announced
                if not announced:  # only once the claim won: a refused approve prints no stream
                    announced = True
                    printer.started(run_id, " resumed" if decided.said == "approved" else f" resumed ({decided.said})")
                    terminal.stderr_hint(self.stderr, run_id)
                printer.step(step)

            decided.take(runtime, run_id, on_step=on_step)
        return printer.summary(runtime.status(run_id))

    def _queued(
        self, runtime: AgentRuntime, run_id: Any, decided: Decided, printer: terminal.StreamPrinter, *, follow: bool
    ) -> int:
        after = runtime.events(run_id)[-1:]  # the stream so far is not repeated when following
        handed = decided.take(runtime, run_id, queued=True)
        printer.started(run_id, f" {decided.said}; a worker resumes it")
        terminal.waiting_for_queue(self.stderr, handed)
        if not follow:
            return console.EXIT_OK
        try:
            run = terminal.follow(
                runtime, run_id, after=after[0].sequence if after else -1, on_step=printer.step, on_delta=printer.delta
            )
        except KeyboardInterrupt:
            raise terminal.interrupted_follow(run_id) from None
        return printer.summary(run)
