"""TaskNotifier: one workflow per A2A push subscription, telling the subscriber each change of
its task's state until the task ends.

It runs on the workers, not in the server that took the subscription, so a server killed
mid-task loses no notification: it follows the run's events in the mirror (activity
`webhooks.run_changes`), folds them into the task's state (agentledger.core.task_states)
and, at each change, makes one signed delivery (`webhooks.deliver`), retried by Temporal
with backoff and recorded in Postgres. Deliveries go in order; each has an id derived from
the subscription and the event, so a retried one is the same delivery. The last one carries
the receipt's summary; then the workflow ends. A subscription removed meanwhile ends it at
its next delivery.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

from agentledger.workflows.webhook_calls import deliver, run_changes_after

with workflow.unsafe.imports_passed_through():
    from agentledger.core import constants as names
    from agentledger.core import task_states
    from agentledger.core.webhook_models import (
        DeliveryInput,
        NotifierInput,
        RunChanges,
        RunEventRow,
    )

__all__ = ["TaskNotifierWorkflow"]


@workflow.defn(name=names.TASK_NOTIFIER_WORKFLOW_NAME)
class TaskNotifierWorkflow:
    @workflow.run
    async def run(self, input: NotifierInput) -> None:
        state = input.state
        seq = input.after_seq
        while True:
            changes = await run_changes_after(input.run_id, seq)
            for event in changes.events:
                after = task_states.state_after(event.type, event.data, state or "")
                if after in task_states.FINAL and not changes.ended:
                    break  # told with the receipt's summary, once the receipt is there
                seq = event.seq
                if after != state:
                    state = after
                    if not await self._deliver(input, event, after, changes):
                        return
            else:
                if changes.ended:
                    return
                if workflow.info().is_continue_as_new_suggested():
                    workflow.continue_as_new(
                        input.model_copy(update={"after_seq": seq, "state": state})
                    )
                continue
            await workflow.sleep(timedelta(seconds=1))

    async def _deliver(
        self, input: NotifierInput, event: RunEventRow, state: str, changes: RunChanges
    ) -> bool:
        """One change told; False once the subscription is gone."""
        final = state in task_states.FINAL
        text = changes.summary.get("text") if final and changes.summary else None
        body = task_states.status_update(
            task_id=input.run_id,
            context_id=input.context_id,
            state=state,
            at=event.at,
            seq=event.seq,
            event=event.type,
            text=str(text) if text else None,
        )
        delivery = DeliveryInput(
            delivery_id=f"{input.subscription_id}#{event.seq}",
            subscription_id=input.subscription_id,
            tenant=input.tenant,
            run_id=input.run_id,
            event=state,
            body=body,
        )
        delivered = await deliver(delivery)
        # One failed for good is recorded as failed; the next change is still told.
        return delivered is None or delivered.status != "dropped"
