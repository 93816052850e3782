"""WebhookRedelivery: one recorded delivery made again, on a person's request
(`agentledger notifications redeliver`, `POST /v1/notifications/{name}/deliveries/{id}/redeliver`).

The body is the one recorded, under the delivery's own id (`AgentLedger-Delivery`, as
GitHub's redeliveries keep theirs), signed afresh, retried by Temporal as any delivery
(agentledger.workflows.webhook_calls), and its record says what came of it.
"""

from __future__ import annotations

from temporalio import workflow

from agentledger.workflows.webhook_calls import deliver

with workflow.unsafe.imports_passed_through():
    from agentledger.core import constants as names
    from agentledger.core.webhook_models import DeliveryInput, DeliveryResult

__all__ = ["RedeliveryWorkflow"]


@workflow.defn(name=names.REDELIVERY_WORKFLOW_NAME)
class RedeliveryWorkflow:
    @workflow.run
    async def run(self, input: DeliveryInput) -> DeliveryResult | None:
        """The delivery made (None: it failed for good, and is recorded so)."""
        return await deliver(input)
