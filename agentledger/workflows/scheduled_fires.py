"""ScheduledFire: one fire of a schedule, started by its Temporal Schedule.

It starts the fire's run as its child, the way every workflow starts a run
(agentledger.workflows.run_starts): under its tenant's policy read now (approvers, weight,
allowed priorities, a capped tenant's queue), refused while an enforcing budget of the
tenant (or of the schedule) is spent. The run's id derives from the schedule and the fire
time, so a fire is one run whatever is retried or replayed; its receipt names the schedule
(`trigger`). The fire then waits for its run to end, so the schedule's overlap policy is
about runs: `skip` skips a fire while the last one's run is busy, `cancel_other` cancels it.
Each fire's outcome (started, skipped and why, ended) is written to the mirror.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import SearchAttributeKey
from temporalio.exceptions import ChildWorkflowError, WorkflowAlreadyStartedError

from agentledger.workflows import run_starts

with workflow.unsafe.imports_passed_through():
    from agentledger.activities.schedules import ScheduleActivities
    from agentledger.core import constants as names
    from agentledger.core import fairness
    from agentledger.core.schedule_models import (
        FireInput,
        FireRecord,
        FireResult,
        fire_run_id,
        trigger_of,
    )

__all__ = ["ScheduledFireWorkflow"]

# Set by the server on every workflow a Schedule starts: the time it was scheduled for.
SCHEDULED_AT = SearchAttributeKey.for_datetime("TemporalScheduledStartTime")


@workflow.defn(name=names.SCHEDULED_FIRE_WORKFLOW_NAME)
class ScheduledFireWorkflow:
    @workflow.run
    async def run(self, input: FireInput) -> FireResult:
        info = workflow.info()
        fired_at = info.typed_search_attributes.get(SCHEDULED_AT) or info.start_time
        run_id = fire_run_id(input.tenant, input.schedule, fired_at)
        spec = input.spec.model_copy(
            update={
                "tenant": input.tenant,
                # The scope of its effects: its own, as each fire is a run of its own.
                "idempotency_key": f"schedule:{input.schedule}@{fired_at.isoformat()}",
                "charged_to": input.charged_to,
                "trigger": trigger_of(input.schedule, fired_at),
            }
        )
        fire = FireRecord(
            tenant=input.tenant, schedule=input.schedule, fired_at=fired_at, outcome="started"
        )
        read = await run_starts.read_policy(spec)
        if isinstance(read, str):  # refused now (a spent budget, a priority): no run
            await self._record(fire.model_copy(update={"outcome": "skipped", "reason": read}))
            return FireResult(run_id=None, outcome="skipped", reason=read)
        await self._record(fire.model_copy(update={"run_id": run_id}))
        try:
            handle = await run_starts.start_run(
                read,
                run_id=run_id,
                summary=f"schedule {input.schedule}, fire of {fired_at.isoformat()}",
            )
        except WorkflowAlreadyStartedError:
            return FireResult(run_id=run_id, outcome="started", reason="started before")
        try:
            ended = (await handle).status.value
        except ChildWorkflowError as err:  # a failed or cancelled run ends so in Temporal
            ended = "cancelled" if "cancel" in str(err.cause or err).lower() else "failed"
        reason = f"the run ended {ended}"
        await self._record(
            fire.model_copy(update={"run_id": run_id, "outcome": "ended", "reason": reason})
        )
        return FireResult(run_id=run_id, outcome="ended", reason=reason)

    async def _record(self, fire: FireRecord) -> None:
        await workflow.execute_activity_method(
            ScheduleActivities.record_fire,
            fire,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=fairness.MIRROR_RETRY,  # retried until Postgres answers
        )
