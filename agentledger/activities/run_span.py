"""The run's `invoke_agent` span: made once, by the activity that ends the run, never by
workflow code, which replays (an evicted run, a restarted worker) and would make it again.

Its model and tool spans are made long before it, by other activities on other workers,
so its ids are derived from the run id: each of them names `run_span_context(run_id)` as
its parent with no state carried through the workflow, and the span made at the end takes
exactly those ids (`invoke_agent_span`). It sits in the trace that is current in the
activities (Temporal's `TracingInterceptor` carries the run's one trace through them), or
in a trace derived from the run id too when there is none.

Choosing a span's ids needs the OpenTelemetry SDK's tracer provider (the application's
own, the one Temporal's OpenTelemetry plugin wraps, or the one AGENTLEDGER_OTEL installs): its
id generator is wrapped to hand out the
chosen ids inside `chosen_ids` and its own everywhere else. With another provider the
model and tool spans keep Temporal's activity spans as parents (`owns_span_ids`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime

from opentelemetry import context, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, TraceFlags

# (trace id, span id) the next span made in this task must have; None: the provider's own.
_chosen: ContextVar[tuple[int, int] | None] = ContextVar("agentledger_chosen_ids", default=None)


class _ChosenIds(IdGenerator):
    """The provider's id generator, but for the ids `chosen_ids` names."""

    def __init__(self, inner: IdGenerator) -> None:
        self.inner = inner

    def generate_span_id(self) -> int:
        chosen = _chosen.get()
        return chosen[1] if chosen else self.inner.generate_span_id()

    def generate_trace_id(self) -> int:
        chosen = _chosen.get()
        return chosen[0] if chosen else self.inner.generate_trace_id()


def owns_span_ids() -> bool:
    """Whether spans can be given chosen ids: the process's tracer provider is the SDK's
    (whose generator is wrapped once, here). Call before taking a tracer."""
    provider = trace.get_tracer_provider()
    # The SDK's OpenTelemetry plugin installs a replay-safe provider around an SDK one
    # (temporalio.contrib.opentelemetry.create_tracer_provider), whose tracers it wraps.
    provider = getattr(provider, "_tracer_provider", provider)
    if not isinstance(provider, TracerProvider):
        return False
    if not isinstance(provider.id_generator, _ChosenIds):
        # Typed as the default generator; any IdGenerator serves (the SDK calls only these).
        provider.id_generator = _ChosenIds(provider.id_generator)  # type: ignore[assignment]
    return True


def run_span_context(run_id: str, turn: int | None = None) -> SpanContext:
    """The ids of the run's `invoke_agent` span (or of a session turn's), the same in every
    activity of the run."""
    current = trace.get_current_span().get_span_context()
    if current.is_valid:
        trace_id, flags = current.trace_id, current.trace_flags
    else:
        trace_id, flags = _derived(f"trace {run_id}", 16), TraceFlags(TraceFlags.SAMPLED)
    name = f"invoke_agent {run_id}" if turn is None else f"invoke_agent {run_id} turn {turn}"
    return SpanContext(trace_id, _derived(name, 8), is_remote=True, trace_flags=flags)


def under_run_span(run_id: str) -> context.Context:
    """A context whose parent span is the run's `invoke_agent` span."""
    return trace.set_span_in_context(NonRecordingSpan(run_span_context(run_id)))


def current_link() -> list[Link]:
    """A link to the span current here (Temporal's activity span), if any."""
    current = trace.get_current_span().get_span_context()
    return [Link(current)] if current.is_valid else []


@contextmanager
def chosen_ids(ids: SpanContext) -> Iterator[None]:
    """The span started inside gets `ids`' trace and span id (see `owns_span_ids`)."""
    token = _chosen.set((ids.trace_id, ids.span_id))
    try:
        yield
    finally:
        _chosen.reset(token)


def nanoseconds(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000_000)


def _derived(name: str, size: int) -> int:
    value = int.from_bytes(hashlib.sha256(f"agentledger {name}".encode()).digest()[:size], "big")
    return value or 1  # zero is the invalid id
