"""The GenAI semantic conventions' client metrics, `gen_ai.client.token.usage` and
`gen_ai.client.operation.duration`, recorded through the process's OpenTelemetry meter
provider (the application's own, or the one AGENTLEDGER_OTEL installs), beside the spans.

Recorded by the model activity, once per attempt that ran: a replay of the workflow runs no
activity, and a response an earlier attempt paid for is not counted again. The names come
from `opentelemetry-semantic-conventions`, not typed here.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from opentelemetry import metrics
from opentelemetry.metrics import Histogram
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics

METER_NAME = "agentledger"


@cache
def _histograms(provider: metrics.MeterProvider) -> tuple[Histogram, Histogram]:
    meter = provider.get_meter(METER_NAME)
    return (
        gen_ai_metrics.create_gen_ai_client_token_usage(meter),
        gen_ai_metrics.create_gen_ai_client_operation_duration(meter),
    )


def record_token_usage(attributes: dict[str, Any], input_tokens: int, output_tokens: int) -> None:
    """One model call's tokens, once per direction (`gen_ai.token.type`)."""
    usage, _ = _histograms(metrics.get_meter_provider())
    for kind, tokens in (("input", input_tokens), ("output", output_tokens)):
        usage.record(tokens, {**attributes, gen_ai.GEN_AI_TOKEN_TYPE: kind})


def record_duration(attributes: dict[str, Any], seconds: float) -> None:
    """How long one operation (a model call attempt) took, failed or not."""
    _, duration = _histograms(metrics.get_meter_provider())
    duration.record(seconds, attributes)
