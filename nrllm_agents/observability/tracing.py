"""Traces: whether this process traces, its tracer, and the trace context a run carries.

Off by default, and then free: no tracer, so the runtime builds no spans (``spans.begin`` answers
``None`` and the step path checks one attribute). Tracing is on when the host configured its own
OpenTelemetry tracer provider (before or after Django started), or when the standard
``OTEL_EXPORTER_OTLP_*`` variables ask for export: ``configure()`` then builds the SDK's provider
with the OTLP/HTTP exporter behind a batch processor, every other setting from the standard
variables, and sets it as the process's provider so the host's own instrumentations join the same
traces. The SDK and the exporter are the optional ``otel`` extra; only the API is needed to trace
through a host's provider.

A run keeps the W3C trace context it continues in ``AgentRun.trace_context`` (``stored()``),
written when it is created. The variables and what a run looks like: docs/tracing.md.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context

logger = logging.getLogger(__name__)

SCOPE = "nrllm_agents"
DEFAULT_SERVICE_NAME = "nrllm_agents"
CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
# The values of CAPTURE_CONTENT that put message contents on spans: the boolean the conventions
# named first, and the newer modes that include spans (we emit no GenAI events).
_CAPTURE_ON = {"true", "1", "span_only", "span_and_event"}

_state: dict[str, Any] = {"tracer": None, "installed": False, "provider": None}


def asked_by_environment() -> bool:
    """Whether the standard variables ask this process to export traces over OTLP."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = {e.strip().lower() for e in os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")}
    if "otlp" not in exporters:
        return False
    return bool(os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def sdk_missing() -> str | None:
    """The module the environment's tracing needs and cannot import, or ``None``."""
    for module in ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http.trace_exporter"):
        try:
            __import__(module)
        except ImportError:
            return module
    return None


def configure() -> bool:
    """At start-up (``AppConfig.ready``): build and set the OTLP provider when the environment
    asks for one and no provider is set yet. Returns whether tracing is on now. Never raises:
    a process that cannot trace runs as it would without tracing (and says why, once)."""
    if _state["installed"]:
        return _state["tracer"] is not None
    if _host_provider() is None and asked_by_environment():
        missing = sdk_missing()
        if missing is not None:
            logger.warning("tracing asked for by OTEL_EXPORTER_OTLP_*, but %s is not installed; not tracing", missing)
            return False
        try:
            trace.set_tracer_provider(_otlp_provider())
        except Exception:
            logger.exception("the OTLP tracer provider could not be built; not tracing")
            return False
    return tracer() is not None


def _otlp_provider() -> Any:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    provider = TracerProvider(resource=resource)  # the sampler from OTEL_TRACES_SAMPLER(_ARG)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # OTEL_BSP_*, OTEL_EXPORTER_OTLP_*
    return provider


def _host_provider() -> Any:
    """The process's tracer provider when one was set (by the host or by ``configure``), else None."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return None
    return provider


def tracer() -> trace.Tracer | None:
    """The tracer our spans are made with, or ``None`` when this process does not trace.

    Asked once per segment (never per step): a provider the host sets after start-up is found
    at the next segment."""
    found: trace.Tracer | None = _state["tracer"]
    if found is not None or _state["installed"]:
        return found
    provider = _host_provider()
    if provider is None:
        return None
    found = _state["tracer"] = provider.get_tracer(SCOPE)
    return found


def install(provider: Any) -> None:
    """Trace through ``provider`` from now on, whatever the process's own provider (``None``:
    never trace). For tests and benchmarks, which compare both in one process."""
    _state["installed"] = True
    _state["provider"] = provider
    _state["tracer"] = None if provider is None else provider.get_tracer(SCOPE)


def uninstall() -> None:
    """Forget ``install``: back to the process's provider, looked up again."""
    _state["installed"] = False
    _state["tracer"] = _state["provider"] = None


def capture_content() -> bool:
    """Whether message contents go on spans: only when ``CAPTURE_CONTENT`` asks (opt-in)."""
    return os.environ.get(CAPTURE_CONTENT, "").strip().lower() in _CAPTURE_ON


def carrier(ctx: Context | None = None) -> dict[str, str]:
    """The trace context of ``ctx`` (default: the current one) as headers (``traceparent``,
    ``tracestate``, and whatever else the process's propagators carry); empty when no span."""
    from opentelemetry import propagate

    headers: dict[str, str] = {}
    propagate.inject(headers, context=ctx)
    return headers


def context_from(headers: Mapping[str, Any] | None) -> Context | None:
    """The context a stored or received carrier names, or ``None`` when it names no valid span."""
    if not isinstance(headers, Mapping) or not headers.get("traceparent"):
        return None
    from opentelemetry import propagate

    try:
        ctx = propagate.extract({str(k): str(v) for k, v in headers.items()})
    except (TypeError, ValueError):
        return None
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def stored() -> dict[str, Any]:
    """The columns that make a new run continue the current trace: ``{"trace_context": …}``
    when this process traces and a span is current (an HTTP request's, a tool's), else ``{}``."""
    if tracer() is None or not trace.get_current_span().get_span_context().is_valid:
        return {}
    return {"trace_context": carrier()}


def flush(timeout_millis: int = 5000) -> None:
    """Export what is still buffered: a work horse calls this before it exits (``os._exit``
    skips the provider's own shutdown). Does nothing when this process does not trace."""
    if _state["tracer"] is None:
        return
    provider = _state["provider"] or trace.get_tracer_provider()
    force_flush = getattr(provider, "force_flush", None)
    if force_flush is None:
        return
    try:
        force_flush(timeout_millis)
    except Exception:
        logger.exception("flushing spans failed; they are lost")
