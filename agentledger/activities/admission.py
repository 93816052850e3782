"""The admission queue's I/O: each run's place in its tenant's queue, and which admitted
runs Temporal has closed."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from temporalio import activity
from temporalio.client import Client, WithStartWorkflowOperation, WorkflowExecutionStatus
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from agentledger.core import constants as names
from agentledger.core import fairness
from agentledger.core.admission_models import (
    AdmissionInput,
    HoldInput,
    HoldRequest,
    QueuedStart,
    QueueSyncInput,
    RunIdsInput,
    admission_id,
)
from agentledger.core.tenant_policy import PolicyInput, RunPolicy
from agentledger.store.budget_store import BudgetStore
from agentledger.store.tenant_store import TenantStore

DESCRIBES_AT_ONCE = 8


class AdmissionActivities:
    def __init__(self, store: TenantStore, client: Client) -> None:
        self.store = store
        self.client = client

    @activity.defn(name=names.ACTIVITY_TENANT_POLICY)
    async def policy(self, input: PolicyInput) -> RunPolicy:
        """The tenant's policy, for a run a workflow is about to start as its child, with
        the refusal of a spent enforcing budget, if one is."""
        found = await self.store.policy(input.tenant)
        refusal = await BudgetStore(self.store.pool).start_refusal(
            input.tenant, input.charged_to, datetime.now(UTC)
        )
        if refusal is not None:
            found.budget_refusal = f"refused: {refusal[0]}"
        return found

    @activity.defn(name=names.ACTIVITY_ADMISSION_HOLD)
    async def hold(self, request: HoldRequest) -> QueuedStart:
        """Put a run a workflow started (waiting, `spec.admission` naming the tenant's queue)
        in its tenant's queue, creating the queue with the stored limits on first use. Held
        twice, a run is held once."""
        limits = await self.store.limits(request.tenant)
        queue: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
            names.ADMISSION_WORKFLOW_NAME,
            AdmissionInput(tenant=request.tenant, limits=limits, keeps_limits=True),
            id=admission_id(request.tenant),
            task_queue=request.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            priority=fairness.run_priority(
                fairness.HIGHEST_PRIORITY, request.tenant, limits.weight
            ),
        )
        held: QueuedStart = await self.client.execute_update_with_start_workflow(
            names.UPDATE_ADMISSION_HOLD,
            HoldInput(run_id=request.run_id, tenant=request.tenant),
            start_workflow_operation=queue,
            result_type=QueuedStart,
        )
        return held

    @activity.defn(name=names.ACTIVITY_ADMISSION_SYNC)
    async def sync(self, batch: QueueSyncInput) -> None:
        await self.store.sync_queue(batch)

    @activity.defn(name=names.ACTIVITY_ADMISSION_CLOSED)
    async def closed_runs(self, input: RunIdsInput) -> list[str]:
        """The runs that are no longer running: ended without releasing their slot (a
        terminate runs none of the run's code) or gone from Temporal altogether."""
        gate = asyncio.Semaphore(DESCRIBES_AT_ONCE)

        async def closed(run_id: str) -> bool:
            async with gate:
                try:
                    described = await self.client.get_workflow_handle(run_id).describe()
                except RPCError as err:
                    if err.status == RPCStatusCode.NOT_FOUND:
                        return True
                    raise
            return described.status != WorkflowExecutionStatus.RUNNING

        found = await asyncio.gather(*(closed(r) for r in input.run_ids))
        return [r for r, gone in zip(input.run_ids, found, strict=True) if gone]
