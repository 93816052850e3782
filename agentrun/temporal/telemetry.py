"""OpenTelemetry tracing for every Temporal client we make, and so for its workers.

Off unless AGENTRUN_OTEL is set. The OpenTelemetry packages are an optional extra
(`pip install 'agentrun[otel]'`), imported only when tracing is on, so a worker without them
starts as before. Temporal's `TracingInterceptor` on the client gives one trace per run:
the start, the workflow, and each activity (`StartActivity:model.complete`,
`RunActivity:model.complete`, ...), carried across workers in Temporal headers.
"""

from __future__ import annotations

import os
from typing import Any

from temporalio.client import Interceptor

from agentrun.core.errors import SetupError
from agentrun.core.settings import Settings

INSTALL_HINT = "pip install 'agentrun[otel]'"

# The tracer provider we installed ourselves (none when the application brought its own).
_installed_provider: Any = None


def client_interceptors(settings: Settings) -> list[Interceptor]:
    """The interceptors `connect` gives every client: tracing when AGENTRUN_OTEL is set."""
    if not settings.otel:
        return []
    try:
        from temporalio.contrib.opentelemetry import TracingInterceptor
    except ImportError as err:
        raise SetupError(
            f"AGENTRUN_OTEL is set but OpenTelemetry is not installed ({err.name} is missing): "
            f"{INSTALL_HINT}, or unset AGENTRUN_OTEL"
        ) from err
    ensure_tracer_provider()
    return [TracingInterceptor()]


def ensure_tracer_provider() -> None:
    """Keep a tracer provider the process already has (set by the embedding application or by
    `opentelemetry-instrument`); otherwise export spans over OTLP/HTTP to the endpoint the
    standard OTEL_EXPORTER_OTLP_* variables name (default http://localhost:4318)."""
    global _installed_provider
    from opentelemetry import trace

    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as err:
        raise SetupError(
            f"AGENTRUN_OTEL is set and no tracer provider is configured, and the OTLP exporter "
            f"is not installed ({err.name} is missing): {INSTALL_HINT}"
        ) from err
    # OTEL_SERVICE_NAME, when set, names the service; Resource.create reads it.
    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "agentrun"}
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _installed_provider = provider


def shutdown_tracing() -> None:
    """Flush the spans still batched in a provider we installed; entry points call this last,
    since the `agentrun` command leaves with os._exit and would skip OpenTelemetry's atexit
    flush."""
    global _installed_provider
    if _installed_provider is not None:
        _installed_provider.shutdown()
        _installed_provider = None
