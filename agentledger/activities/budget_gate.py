"""The budgets a model call counts against, seen from inside `model.complete`.

Before the provider is called, `admit` asks the budget store for the call's verdict
(agentledger.core.budgets): it goes, it goes told to wrap up, it waits (heartbeating)
while the calls in flight may take the room left, or it is refused, and the run ends
`budget_exhausted`. Once its response is journaled, `landed` frees its place and raises the
alerts it newly made due: a log line, a metric, and a signed delivery to each of the tenant's
webhook subscriptions (agentledger.workflows.budget_alerts).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from temporalio import activity
from temporalio.client import Client
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from agentledger.core import budgets, errors
from agentledger.core import constants as names
from agentledger.core.budgets import Admission
from agentledger.core.fairness import run_queue
from agentledger.core.webhook_models import BudgetAlertInput, budget_alert_id
from agentledger.core.wire import Charge, ModelCallInput
from agentledger.store.budget_store import Alert, BudgetStore

log = logging.getLogger(__name__)
ALERTS = "agentledger_budget_alerts"
# How often a call that waits for the calls in flight asks again.
WAIT_SECONDS = 0.2


class BudgetGate:
    def __init__(self, store: BudgetStore, client: Client | None = None) -> None:
        self.store = store
        # Starts the workflow that delivers an alert to the tenant's webhooks (None: alerts
        # are logged and counted only).
        self.client = client

    async def admit(self, input: ModelCallInput, charge: Charge, prompt_tokens: int) -> Admission:
        """The call's verdict (a prompt of about `prompt_tokens`); raises the run's end when
        a budget is spent."""
        while True:
            admission = await self.store.admit(
                charge,
                input.run_id,
                input.step_id,
                prompt_tokens=prompt_tokens,
                hold_seconds=input.timeout_seconds + input.heartbeat_seconds,
                now=datetime.now(UTC),
            )
            if admission.verdict == "exhausted":
                raise errors.budget_exhausted(admission.reason or "the budget is spent")
            if admission.verdict != "wait":
                return admission
            activity.heartbeat("waiting for the calls in flight under the tenant's budget")
            await asyncio.sleep(WAIT_SECONDS)

    async def landed(self, input: ModelCallInput, charge: Charge, admission: Admission) -> None:
        """The call's response is journaled (or it failed): free its place, raise alerts."""
        if admission.held:
            await self.store.release(input.run_id, input.step_id)
        if not admission.budgeted:
            return
        now = datetime.now(UTC)
        for alert in await self.store.crossed(charge, now):
            if alert.new:
                said(alert, input.run_id)
            if self.client is not None:
                await self._deliver(alert, input.run_id, now)
            await self.store.notified(alert, now)

    async def _deliver(self, alert: Alert, run_id: str, now: datetime) -> None:
        """Start the alert's deliveries to the tenant's webhooks: one workflow per budget,
        period and kind, so an alert raised twice is delivered once."""
        assert self.client is not None
        limit, spend = alert.limit, alert.spend
        start, _ = budgets.period_bounds(limit.period, now)
        event = f"budget.{alert.kind}"
        body = {
            "event": event,
            "tenant": limit.tenant,
            "subject": limit.subject or None,
            "period": limit.period,
            "period_start": start.isoformat(),
            "mode": limit.mode,
            "limit_usd": limit.usd,
            "limit_tokens": limit.tokens,
            "spent_usd": round(spend.usd, 6),
            "spent_tokens": spend.tokens,
            "share": round(budgets.used(limit, spend), 4),
            "run_id": run_id,
        }
        alerting = BudgetAlertInput(tenant=limit.tenant, event=event, body=body)
        try:
            await self.client.start_workflow(
                names.BUDGET_ALERT_WORKFLOW_NAME,
                alerting,
                id=budget_alert_id(limit.tenant, limit.subject, limit.period, start, alert.kind),
                task_queue=run_queue(activity.info().task_queue),
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            )
        except WorkflowAlreadyStartedError:
            pass  # raised before: its deliveries are on their way


def said(alert: Alert, run_id: str) -> None:
    """An alert raised: one log line, and the counter `agentledger_budget_alerts`."""
    limit, spend = alert.limit, alert.spend
    log.warning(
        "budget.%s: the %s budget (%s) is %.0f%% spent (%s), last by run %s",
        alert.kind,
        limit.label,
        budgets.describe(limit),
        budgets.used(limit, spend) * 100,
        budgets.spent_text(spend),
        run_id,
    )
    try:
        meter = activity.metric_meter()
    except RuntimeError:  # outside an activity
        return
    meter.create_counter(ALERTS, "budget alerts raised, by kind and tenant").add(
        1, {"kind": alert.kind, "tenant": limit.tenant}
    )
