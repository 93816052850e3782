"""Agent metrics the activities record, through the SDK's activity meter: they land where
Temporal's own metrics go (Prometheus at AGENTLEDGER_PROMETHEUS_BIND, or the application's own
Runtime). A run's counts (runs, tokens, cost, approvals) come from the workflow's meter
(agentledger.workflows.run_metrics); these are what only an activity sees."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from temporalio import activity
from temporalio.common import MetricMeter

from agentledger.core.wire import MirrorBatch

TOOL_FAILURES = "agentledger_tool_failures"
MIRROR_LAG = "agentledger_mirror_lag"


def count_tool_failure(tool: str, kind: str) -> None:
    """A tool-call attempt that failed (kind: its classified error) or was refused."""
    meter = _meter()
    if meter is None:
        return
    meter.create_counter(
        TOOL_FAILURES, "tool-call attempts that failed or were refused, by tool and kind"
    ).add(1, {"tool": tool, "kind": kind})


def record_mirror_lag(batch: MirrorBatch | None) -> None:
    """How long the oldest event of a mirror write waited for it: from the moment the run
    recorded it to the write's start. Grows when mirror writes queue or fail."""
    meter = _meter()
    if batch is None or not batch.events or meter is None:
        return
    oldest = min(event.at for event in batch.events)
    lag = datetime.now(UTC) - oldest
    meter.create_histogram_timedelta(
        MIRROR_LAG, "from a run's event to the start of its mirror write", "ms"
    ).record(max(lag, timedelta(0)))  # a clock a little behind the workflow's


def _meter() -> MetricMeter | None:
    try:
        return activity.metric_meter()
    except RuntimeError:  # outside an activity (a unit test of a span alone)
        return None
