"""OpenTelemetry tracing for every Temporal client we make, and so for its workers.

Off unless AGENTLEDGER_OTEL is set. The OpenTelemetry packages are an optional extra
(`pip install 'agentledger[otel]'`), imported only when tracing is on, so a worker without them
starts as before. Temporal's `TracingInterceptor` on the client gives one trace per run:
the start, the workflow, and each activity (`StartActivity:model.complete`,
`RunActivity:model.complete`, ...), carried across workers in Temporal headers. The GenAI
metrics (agentledger.activities.genai_metrics) go to the process's meter provider, or to one
installed here beside the tracer provider.
"""

from __future__ import annotations

import os
from typing import Any

from temporalio.client import Interceptor

from agentledger.core.config import AgentLedgerConfig
from agentledger.core.errors import SetupError
from agentledger.core.extras import install_command

# The providers we installed ourselves (none when the application brought its own).
_installed_providers: list[Any] = []


def client_interceptors(settings: AgentLedgerConfig) -> list[Interceptor]:
    """The interceptors `connect` gives every client: tracing when AGENTLEDGER_OTEL is set."""
    if not settings.otel:
        return []
    try:
        from temporalio.contrib.opentelemetry import TracingInterceptor
    except ImportError as err:
        raise SetupError(
            f"AGENTLEDGER_OTEL is set but OpenTelemetry is not installed ({err.name} is missing): "
            f"`{install_command('otel')}`, or unset AGENTLEDGER_OTEL"
        ) from err
    ensure_tracer_provider()
    return [TracingInterceptor()]


def ensure_tracer_provider() -> None:
    """Keep a tracer provider the process already has (set by the embedding application or by
    `opentelemetry-instrument`); otherwise export spans (and the GenAI metrics) over OTLP/HTTP
    to the endpoint the standard OTEL_EXPORTER_OTLP_* variables name (default
    http://localhost:4318)."""
    from opentelemetry import trace

    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as err:
        raise SetupError(
            f"AGENTLEDGER_OTEL is set and no tracer provider is configured, and the OTLP exporter "
            f"is not installed ({err.name} is missing): `{install_command('otel')}`"
        ) from err
    provider = TracerProvider(resource=_resource())
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _installed_providers.append(provider)
    _install_meter_provider()


def _install_meter_provider() -> None:
    """With the tracer provider we install, a meter provider exporting the GenAI metrics over
    OTLP/HTTP too, unless the process has one. An application that set up its own tracing
    keeps its own choice of metrics (none: the API drops them)."""
    from opentelemetry import metrics
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    # The API's stand-in until one is set; it has no public class to test against.
    if type(metrics.get_meter_provider()).__name__ != "_ProxyMeterProvider":
        return
    reader = PeriodicExportingMetricReader(OTLPMetricExporter())
    provider = MeterProvider(resource=_resource(), metric_readers=[reader])
    metrics.set_meter_provider(provider)
    _installed_providers.append(provider)


def _resource() -> Any:
    from opentelemetry.sdk.resources import Resource

    # OTEL_SERVICE_NAME, when set, names the service; Resource.create reads it.
    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {"service.name": "agentledger"}
    return Resource.create(attributes)


def shutdown_tracing() -> None:
    """Flush the spans and metrics still batched in providers we installed; entry points call
    this last, since the `agentledger` command leaves with os._exit and would skip
    OpenTelemetry's atexit flush."""
    while _installed_providers:
        _installed_providers.pop().shutdown()
