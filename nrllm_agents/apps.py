from django.apps import AppConfig

# Imported with the app config, before any app's ready() (the admin's autodiscover imports
# django-rq's collector, which creates a metric): in multiprocess mode the value class must
# already be ours, which names files by slot rather than by pid.
from .observability import metrics  # noqa: F401


class NrllmAgentsConfig(AppConfig):
    name = "nrllm_agents"
    verbose_name = "Agent runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_login_failed
        from django.core.signals import request_started

        from . import checks, executors, live
        from .access import signin
        from .catalog import app_tools
        from .observability import tracing
        from .store import db
        from .validation import run_request
        from .workers import jobs, maintenance

        # The process is wired here, by explicit calls: nothing registers itself at import.
        checks.register_all()
        # typed tools (@tool) from every installed app's agent_tools module, as admin.py is found
        app_tools.discover()
        run_request.app_tool_names = app_tools.names  # requests may name them (validation sits below the catalog)
        # Pooled PostgreSQL connections are checked before they are handed out (a connection the
        # server closed would fail a claim or a maintenance pass), unless the host chose a check.
        db.check_pools_before_use()
        # the listener's clients (cancel watcher first, the hub, the publisher of boundaries)
        live.install()
        # Traces: on when the host set its own tracer provider, or when the standard OTEL_*
        # variables ask for OTLP export (then the provider is built here); off and free otherwise.
        tracing.configure()
        # The in-process executor calls the job by reference: the job sits above the runtime,
        # which dispatches, so the executor cannot import it.
        executors.LOCAL.use_job(jobs.execute_run)

        # A web process on the in-process executor reaps and sweeps by itself (started at its
        # first request, so management commands start no thread).
        request_started.connect(maintenance.start_local, dispatch_uid="nrllm-maintenance")
        # Failed sign-ins are counted (access.signin.ThrottledModelBackend refuses past the rate).
        user_login_failed.connect(signin.count_failure, dispatch_uid="nrllm-sign-in-failures")
