"""``manage.py agent_threads``: create, list and show conversation threads, and purge old ones."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from nrllm_agents.management import console
from nrllm_agents.models import Thread
from nrllm_agents.runtime import threads
from nrllm_agents.validation.run_request import unstorable

LIST_LIMIT = 1000


class Command(BaseCommand):
    help = (
        "Conversation threads. create: a new thread (post to it with agent_run --thread ID). "
        "list: the most recently active threads. show ID: a thread's runs and the transcript its "
        "next run starts from. purge --inactive-for 90d: delete threads without a message for that "
        "long, with their runs and steps (a thread with a run still going is kept; other threads' "
        "runs and forks are never touched)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        create = sub.add_parser("create", help="Create a thread and print its id.")
        console.add_owner_argument(create)
        create.add_argument("--title", default="", help="A title to find it by (at most 200 characters).")
        listing = sub.add_parser("list", help="The most recently active threads, one a line.")
        listing.add_argument(
            "--limit", type=int, default=50, help=f"At most this many (default 50, at most {LIST_LIMIT})."
        )
        show = sub.add_parser("show", help="A thread's runs and its transcript.")
        show.add_argument("thread_id", metavar="ID", help="The thread's id.")
        purge = sub.add_parser("purge", help="Delete threads inactive for a while, with their runs.")
        purge.add_argument(
            "--inactive-for",
            required=True,
            metavar="DURATION",
            help="Threads without a message for this long, e.g. 90d, 12w, 36h.",
        )
        purge.add_argument("--dry-run", action="store_true", help="Count what would go; delete nothing.")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "create":
            title = options["title"]
            if len(title) > 200 or unstorable(title):
                raise console.usage_error("--title: at most 200 characters, without NUL")
            thread = threads.create(owner=console.owner_arg(options["owner"]), title=title)
            self.stdout.write(self.style.SUCCESS(f"thread {thread.pk} created"))
        elif action == "list":
            limit = console.in_range("--limit", options["limit"], 1, LIST_LIMIT) or 50
            for thread in Thread.objects.select_related("owner").order_by("-last_activity_at")[:limit]:
                owner = thread.owner.get_username() if thread.owner is not None else "-"
                line = f"{thread.pk}  {thread.last_activity_at:%Y-%m-%d %H:%M}  {owner}  {thread.title}"
                self.stdout.write(console.terminal_safe(line))
        elif action == "show":
            self._show(options["thread_id"])
        else:
            age = console.parse_duration(options["inactive_for"], "--inactive-for")
            try:
                timezone.now() - age
            except OverflowError:
                raise console.usage_error(f"--inactive-for: {options['inactive_for']!r} is too long ago") from None
            report = threads.purge(inactive_for=age, dry_run=options["dry_run"])
            self.stdout.write(self.style.SUCCESS(report.summary()))

    def _show(self, value: str) -> None:
        try:
            thread = Thread.objects.filter(pk=threads.parse_thread_id(value)).first()
        except threads.ThreadNotFound:
            thread = None
        if thread is None:
            raise CommandError(f"no thread {console.terminal_safe(str(value)[:80])!r}", returncode=console.EXIT_USAGE)
        self.stdout.write(console.terminal_safe(f"thread {thread.pk} {thread.title}".rstrip()))
        for run in thread.runs.order_by("thread_position"):
            mark = " (rolled back)" if run.rolled_back else ""
            prompt = f"(content purged on {run.purged_at:%Y-%m-%d})" if run.purged_at else run.prompt[:80]
            line = f"  #{run.thread_position} {run.pk} {run.status}{mark}: {prompt}"
            self.stdout.write(console.terminal_safe(" ".join(line.split())))
        messages, _ = threads.transcript(thread.pk)
        self.stdout.write(f"transcript ({len(messages)} messages):")
        for m in messages:
            text = m.get("content") or ", ".join(c.get("name", "?") for c in m.get("tool_calls") or [])
            self.stdout.write(console.terminal_safe(f"  {m.get('role')}: {' '.join(str(text).split())[:200]}"))
