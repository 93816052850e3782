"""A run's metrics, through the workflow's metric meter: they land wherever the SDK's go
(Prometheus at AGENTLEDGER_PROMETHEUS_BIND, or the application's own Runtime).

Derived from what the run records (its events and completed steps), so no code path can
count what it did not record. The workflow meter records nothing while a worker replays
history, so a replayed run counts nothing twice; and recording adds no command, so history
is unchanged and every committed history still replays.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.common import MetricCounter

with workflow.unsafe.imports_passed_through():
    from agentledger.core.events import EventType
    from agentledger.core.spec import JsonDict, RunSpec
    from agentledger.core.wire import StepRecord

RUNS_STARTED = "agentledger_runs_started"
RUNS_ENDED = "agentledger_runs_ended"
MODEL_TOKENS = "agentledger_model_tokens"
MODEL_COST = "agentledger_model_cost_usd"
APPROVALS_REQUESTED = "agentledger_approvals_requested"
APPROVALS_CLOSED = "agentledger_approvals_closed"

# An approval that closes other than by a person's decision (the run ended first).
CLOSED_STEP_STATUSES = frozenset({"abandoned", "cancelled"})


def on_event(spec: RunSpec, type: str, data: JsonDict) -> None:
    """Counts runs started and ended (by status), approvals requested and decided."""
    if type == EventType.RUN_STARTED:
        _counter(RUNS_STARTED, "runs started").add(1, {"tenant": spec.tenant, **_agent(spec)})
    elif type == EventType.RUN_FINISHED:
        status = str(data.get("status"))
        _counter(RUNS_ENDED, "runs ended, by status").add(
            1, {"tenant": spec.tenant, "status": status, **_agent(spec)}
        )
    elif type == EventType.APPROVAL_REQUESTED:
        _counter(APPROVALS_REQUESTED, "approvals asked of people").add(1, {"tenant": spec.tenant})
    elif type.startswith("approval.") and type not in (
        EventType.APPROVAL_REFUSED,
        EventType.APPROVAL_COUNTED,
    ):
        _approval_closed(spec, type.removeprefix("approval."))


def on_step(spec: RunSpec, record: StepRecord) -> None:
    """Tokens and cost of each completed model call, by tenant and model; approvals the run
    closed itself (it ended while one waited)."""
    if record.type == "model_call" and record.status == "completed":
        tokens = _counter(MODEL_TOKENS, "tokens of completed model calls", "token")
        labels = {"tenant": spec.tenant, "model": record.name}
        tokens.add(record.tokens_in, {**labels, "direction": "input"})
        tokens.add(record.tokens_out, {**labels, "direction": "output"})
        # A histogram, since counters take whole numbers: its sum is the cost.
        workflow.metric_meter().create_histogram_float(
            MODEL_COST, "cost of each completed model call (sum: the total)", "USD"
        ).record(record.cost_usd, labels)
    elif record.type == "approval" and record.status in CLOSED_STEP_STATUSES:
        _approval_closed(spec, record.status)


def _approval_closed(spec: RunSpec, decision: str) -> None:
    _counter(APPROVALS_CLOSED, "approvals decided, expired or abandoned").add(
        1, {"tenant": spec.tenant, "decision": decision}
    )


def _agent(spec: RunSpec) -> dict[str, str]:
    return {"agent": spec.agent}


def _counter(name: str, description: str, unit: str | None = None) -> MetricCounter:
    # The SDK keeps one metric per name: creating it again is a look-up.
    return workflow.metric_meter().create_counter(name, description, unit)
