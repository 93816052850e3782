"""BudgetAlert: one budget alert (`budget.warning`, `budget.exceeded`) delivered, signed, to
each of its tenant's webhooks with no run.

The model call that made the alert due starts it (agentledger.activities.budget_gate),
with an id that names the budget, the period and the kind, so an alert is delivered once
however many calls see it due. Each delivery is `webhooks.deliver`, retried by Temporal with
backoff and recorded in Postgres (agentledger.workflows.webhook_calls); a receiver that
stays down past a day has its delivery recorded as failed.
"""

from __future__ import annotations

from temporalio import workflow

from agentledger.workflows import webhook_calls

with workflow.unsafe.imports_passed_through():
    from agentledger.core import constants as names
    from agentledger.core.webhook_models import BudgetAlertInput, DeliveryInput

__all__ = ["BudgetAlertWorkflow"]


@workflow.defn(name=names.BUDGET_ALERT_WORKFLOW_NAME)
class BudgetAlertWorkflow:
    @workflow.run
    async def run(self, input: BudgetAlertInput) -> int:
        """Deliver the alert to each of the tenant's webhooks; how many took it."""
        subscriptions = await webhook_calls.tenant_subscriptions(input.tenant)
        delivered = 0
        for each in subscriptions:
            delivery = DeliveryInput(
                delivery_id=f"{workflow.info().workflow_id}#{each.subscription_id}",
                subscription_id=each.subscription_id,
                tenant=input.tenant,
                event=input.event,
                body=input.body,
            )
            # One failed for good is recorded as failed; the next webhook still gets it.
            result = await webhook_calls.deliver(delivery)
            delivered += result is not None and result.status == "delivered"
        return delivered
