"""RunNotifier: one workflow per run of a tenant that has notification webhooks, telling
each of them what the run does (`approval.requested`, `approval.decided`, `run.finished`,
`run.failed`; agentledger.core.notifications) until the run ends.

The task notifier's machinery, for a tenant instead of one A2A task: it follows the run's
events in the mirror (activity `webhooks.run_changes`), reads the tenant's subscriptions
when an event is to be told (`webhooks.tenant_subscriptions`), and makes one signed delivery to each
(`webhooks.deliver`), retried by Temporal with backoff and recorded in Postgres. A worker
killed mid-delivery loses nothing: the activity is tried again on another. Each delivery's
id is the subscription's, the run's and the event's, the same on every retry.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow

from agentledger.workflows.webhook_calls import deliver, run_changes_after, tenant_subscriptions

with workflow.unsafe.imports_passed_through():
    from agentledger.core import constants as names
    from agentledger.core.events import EventType
    from agentledger.core.notifications import notification
    from agentledger.core.webhook_models import DeliveryInput, RunNotifierInput

__all__ = ["RunNotifierWorkflow"]

# How many seconds a notifier waits for a run's last events once its receipt is written.
LAST_EVENTS_WAITS = 30


@workflow.defn(name=names.RUN_NOTIFIER_WORKFLOW_NAME)
class RunNotifierWorkflow:
    @workflow.run
    async def run(self, input: RunNotifierInput) -> None:
        seq = input.after_seq
        finished, waits = False, 0
        while True:
            changes = await run_changes_after(input.run_id, seq)
            for event in changes.events:
                seq = event.seq
                told = notification(
                    event.type, event.data, tenant=input.tenant, run_id=input.run_id,
                    seq=event.seq, at=event.at, agent=input.agent,
                )  # fmt: skip
                finished = finished or event.type == EventType.RUN_FINISHED
                if told is not None:
                    await self._tell(input, event.seq, *told)
            # The receipt can land before the run's last events: the run has ended for its
            # notifier once its end is told, or (a run ended without one: terminated) once
            # a while has passed with nothing more.
            if changes.ended and not changes.events:
                if finished or waits >= LAST_EVENTS_WAITS:
                    return
                waits += 1
                await workflow.sleep(timedelta(seconds=1))
                continue
            if workflow.info().is_continue_as_new_suggested():
                workflow.continue_as_new(input.model_copy(update={"after_seq": seq}))

    async def _tell(
        self, input: RunNotifierInput, seq: int, name: str, body: dict[str, Any]
    ) -> None:
        """One event told to every subscription at once: a slow receiver holds no other."""
        found = await tenant_subscriptions(input.tenant)
        await asyncio.gather(
            *(self._deliver(input, each.subscription_id, seq, name, body) for each in found)
        )

    async def _deliver(
        self,
        input: RunNotifierInput,
        subscription: str,
        seq: int,
        name: str,
        body: dict[str, Any],
    ) -> None:
        delivery = DeliveryInput(
            delivery_id=f"{subscription}#{input.run_id}#{seq}",
            subscription_id=subscription,
            tenant=input.tenant,
            run_id=input.run_id,
            event=name,
            body=body,
        )
        await deliver(delivery)  # one failed for good is recorded; the next is still told
