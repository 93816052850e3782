"""BudgetAlert: one budget alert (`budget.warning`, `budget.exceeded`) delivered, signed, to
each of its tenant's webhooks with no run.

The model call that made the alert due starts it (agentledger.activities.budget_gate),
with an id that names the budget, the period and the kind, so an alert is delivered once
however many calls see it due. Each delivery is `webhooks.deliver`, retried by Temporal with
the task notifier's backoff and recorded in Postgres; a receiver that stays down past a day
has its delivery recorded as failed.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from agentledger.activities.webhooks import WebhookActivities
    from agentledger.core import constants as names
    from agentledger.core.webhook_models import BudgetAlertInput, DeliveryInput, TenantInput
    from agentledger.workflows.task_notifier import DELIVERY_GIVE_UP, DELIVERY_RETRY

__all__ = ["BudgetAlertWorkflow"]


@workflow.defn(name=names.BUDGET_ALERT_WORKFLOW_NAME)
class BudgetAlertWorkflow:
    @workflow.run
    async def run(self, input: BudgetAlertInput) -> int:
        """Deliver the alert to each of the tenant's webhooks; how many took it."""
        subscriptions = await workflow.execute_activity_method(
            WebhookActivities.tenant_subscriptions,
            TenantInput(tenant=input.tenant),
            start_to_close_timeout=timedelta(seconds=30),
        )
        delivered = 0
        for each in subscriptions:
            delivery = DeliveryInput(
                delivery_id=f"{workflow.info().workflow_id}#{each.subscription_id}",
                subscription_id=each.subscription_id,
                tenant=input.tenant,
                event=input.event,
                body=input.body,
            )
            try:
                result = await workflow.execute_activity_method(
                    WebhookActivities.deliver,
                    delivery,
                    start_to_close_timeout=timedelta(seconds=30),
                    schedule_to_close_timeout=DELIVERY_GIVE_UP,
                    retry_policy=DELIVERY_RETRY,
                )
            except ActivityError:
                continue  # recorded as failed; the next webhook still gets it
            delivered += result.status == "delivered"
        return delivered
