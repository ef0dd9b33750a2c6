"""manage.py agent_worker: one process executing many queued runs at once, one thread per run."""

from __future__ import annotations

from typing import Any

import redis
from django.core.management.base import BaseCommand, CommandError, CommandParser

from nrllm_agents.conf import app_settings
from nrllm_agents.executors import dispatch
from nrllm_agents.workers.threaded import ThreadedWorker, default_concurrency


class Command(BaseCommand):
    help = (
        "Execute queued runs from the django-rq queues, up to --concurrency at once in this process "
        "(one thread per run, a bounded pool of database connections). Runs beside rqworker "
        "processes, on any number of machines. SIGTERM hands every run in flight back to the queue "
        "at its next step boundary, once its step in flight ended (within NRLLM_WORKER_DRAIN_SECONDS); "
        "a second SIGTERM exits at once and the reaper recovers the runs. "
        "RQ job timeouts and stop-job commands do not apply: the run lease and cancel replace them."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "queues",
            nargs="*",
            metavar="QUEUE",
            help=f"Queues to take jobs from, in priority order (default: {app_settings.QUEUE_NAME}).",
        )
        parser.add_argument(
            "--concurrency",
            type=int,
            default=None,
            help="Runs executed at once (default: NRLLM_WORKER_CONCURRENCY, else 100). "
            "The worker dequeues only while it has a free slot.",
        )
        parser.add_argument("--name", default=None, help="Worker name in Redis (default: RQ's, unique).")
        parser.add_argument(
            "--burst", action="store_true", help="Quit once the queues are empty and every run in flight has finished."
        )
        parser.add_argument(
            "--with-scheduler",
            action="store_true",
            help="Also run RQ's scheduler (delayed retries); one per deployment is enough.",
        )

    def handle(
        self,
        *args: Any,
        queues: list[str],
        concurrency: int | None,
        name: str | None,
        burst: bool,
        with_scheduler: bool,
        **options: Any,
    ) -> None:
        import django_rq

        if not dispatch.uses_rq():
            raise CommandError(
                "agent_worker needs the RQ executor (REDIS_URL set, NRLLM_AGENTS['EXECUTOR'] not 'local'); "
                "without it queued runs execute in the process that queues them",
                returncode=2,
            )
        concurrency = default_concurrency() if concurrency is None else concurrency
        if concurrency < 1:
            raise CommandError("--concurrency must be a positive integer", returncode=2)
        level = {0: "WARNING", 1: "INFO"}.get(options["verbosity"], "DEBUG")
        from rq.logutils import setup_loghandlers

        setup_loghandlers(level)
        try:
            # (django-rq annotates worker_class as type[Worker]; it builds any rq BaseWorker subclass)
            worker = django_rq.get_worker(
                *(queues or (app_settings.QUEUE_NAME,)),
                worker_class=ThreadedWorker,  # type: ignore[arg-type]
                name=name,
                concurrency=concurrency,
            )
        except (KeyError, ValueError) as exc:  # a queue not in RQ_QUEUES, or queues on different Redis
            raise CommandError(f"bad queue: {exc}", returncode=2) from None
        try:
            worker.work(burst=burst, with_scheduler=with_scheduler, logging_level=level)
        except redis.exceptions.ConnectionError as exc:
            raise CommandError(f"Redis is unreachable: {exc}", returncode=1) from None
