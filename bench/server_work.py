"""What the Temporal server did for a level, counted by the dev server's own Prometheus metrics.

The server's CPU per step is about half of each system's cost on this machine, and it
differs between systems on the same server. These counts say what it was spent on: writes
of a workflow's state, workflow tasks, activities dispatched through the matching service
(an activity started eagerly, in the reply to the workflow task that scheduled it, skips
matching and the state write of its start), tasks the matching service had to store
because no poller was waiting, and visibility writes.
"""

from __future__ import annotations

import re
import urllib.request

# What each figure counts: (metric, operation), summed over the metric's other labels.
COUNTERS: dict[str, tuple[str, str]] = {
    "workflow_state_writes": ("persistence_latency_count", "UpdateWorkflowExecution"),
    "workflow_tasks": ("client_latency_count", "HistoryClientRespondWorkflowTaskCompleted"),
    "activities": ("client_latency_count", "HistoryClientRespondActivityTaskCompleted"),
    "activities_through_matching": (
        "client_latency_count",
        "HistoryClientRecordActivityTaskStarted",
    ),
    "tasks_stored_by_matching": ("persistence_latency_count", "CreateTasks"),
    "visibility_writes": ("visibility_persistence_latency_count", "UpsertWorkflowExecution"),
}
LABELS = {
    "workflow_state_writes": "writes of a workflow's state",
    "workflow_tasks": "workflow tasks",
    "activities": "activities completed",
    "activities_through_matching": "activities dispatched through matching (not eagerly)",
    "tasks_stored_by_matching": "tasks stored by matching (no poller was waiting)",
    "visibility_writes": "visibility writes",
}
Totals = dict[tuple[str, str], float]
SAMPLE = re.compile(r"^(\w+)(?:\{(.*)\})? ([-+.\deE]+|NaN)$")
OPERATION = re.compile(r'operation="([^"]*)"')


def parse(text: str) -> Totals:
    """Prometheus text → (metric, operation) → value, summed over the other labels."""
    wanted = set(COUNTERS.values())
    totals: Totals = {}
    for line in text.splitlines():
        found = SAMPLE.match(line)
        if found is None:
            continue
        name, labels, value = found.groups()
        operation = OPERATION.search(labels or "")
        key = (name, operation.group(1) if operation else "")
        if key in wanted and value != "NaN":
            totals[key] = totals.get(key, 0.0) + float(value)
    return totals


def scrape(metrics_url: str | None) -> Totals | None:
    """The server's counters now, or None when it serves none (a stack without the port)."""
    if metrics_url is None:
        return None
    try:
        with urllib.request.urlopen(metrics_url, timeout=5) as response:
            return parse(response.read().decode())
    except OSError:
        return None


def per_step(
    before: Totals | None,
    after: Totals | None,
    steps: int,
) -> dict[str, float] | None:
    """Each figure's growth between two scrapes, per step done in between."""
    if before is None or after is None or steps <= 0:
        return None
    return {
        name: (after.get(key, 0.0) - before.get(key, 0.0)) / steps for name, key in COUNTERS.items()
    }
