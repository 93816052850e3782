"""What a workflow asks of the webhook activities (agentledger.activities.webhooks): the
one way the notifiers (task_notifier.py, run_notifier.py) and budget alerts
(budget_alerts.py) follow a run, read a tenant's webhooks and make a signed delivery.

A delivery is `webhooks.deliver`, retried by Temporal alone: a receiver down for a while
gets it when it is back, backoff up to a minute apart, for up to a day; then it is recorded
as failed and the caller goes on to the next.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from agentledger.activities.webhooks import ATTEMPT_SECONDS, WebhookActivities
    from agentledger.core.webhook_models import (
        ChangesInput,
        DeliveryInput,
        DeliveryResult,
        RunChanges,
        TenantInput,
        TenantSubscription,
    )

DELIVERY_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
)
DELIVERY_GIVE_UP = timedelta(days=1)
# One attempt's bound and a little: an attempt lost with its worker is made again that soon.
DELIVERY_ATTEMPT = timedelta(seconds=ATTEMPT_SECONDS + 5)
CHANGES_WAIT_SECONDS = 60.0
SUBSCRIPTIONS_TIMEOUT = timedelta(seconds=30)


async def deliver(delivery: DeliveryInput) -> DeliveryResult | None:
    """Make the delivery; None once it failed for good (it is recorded as failed)."""
    try:
        result: DeliveryResult = await workflow.execute_activity_method(
            WebhookActivities.deliver,
            delivery,
            start_to_close_timeout=DELIVERY_ATTEMPT,
            schedule_to_close_timeout=DELIVERY_GIVE_UP,
            retry_policy=DELIVERY_RETRY,
        )
    except ActivityError:
        return None
    return result


async def tenant_subscriptions(tenant: str) -> list[TenantSubscription]:
    """The tenant's webhooks with no run, as they are now: one added meanwhile hears the
    next notice."""
    found: list[TenantSubscription] = await workflow.execute_activity_method(
        WebhookActivities.tenant_subscriptions,
        TenantInput(tenant=tenant),
        start_to_close_timeout=SUBSCRIPTIONS_TIMEOUT,
    )
    return found


async def run_changes_after(run_id: str, seq: int) -> RunChanges:
    """The run's events after `seq`, waited for a while (activity `webhooks.run_changes`):
    what a notifier follows a run by."""
    changes: RunChanges = await workflow.execute_activity_method(
        WebhookActivities.run_changes,
        ChangesInput(run_id=run_id, after_seq=seq, wait_seconds=CHANGES_WAIT_SECONDS),
        start_to_close_timeout=timedelta(seconds=CHANGES_WAIT_SECONDS + 30),
        heartbeat_timeout=timedelta(seconds=20),
    )
    return changes
