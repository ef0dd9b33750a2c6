"""A host's WSGI module that traces its requests with ``opentelemetry-instrumentation-django``.

What a host project does to get the request spans our runs continue: instrument Django before
the application is built. The tracer provider itself is built by nrllm_agents at start-up from
the standard ``OTEL_*`` variables (``observability/tracing.py``).
"""

from opentelemetry.instrumentation.django import DjangoInstrumentor

DjangoInstrumentor().instrument()

from config.wsgi import application  # noqa: E402  (after the instrumentation, which adds its middleware)

__all__ = ["application"]
