"""The admission queue's I/O: each run's place in its tenant's queue, and which admitted
runs Temporal has closed."""

from __future__ import annotations

import asyncio

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from agentrun.core.admission_models import QueueSyncInput, RunIdsInput
from agentrun.core.constants import ACTIVITY_ADMISSION_CLOSED, ACTIVITY_ADMISSION_SYNC
from agentrun.store.tenant_store import TenantStore

DESCRIBES_AT_ONCE = 8


class AdmissionActivities:
    def __init__(self, store: TenantStore, client: Client) -> None:
        self.store = store
        self.client = client

    @activity.defn(name=ACTIVITY_ADMISSION_SYNC)
    async def sync(self, batch: QueueSyncInput) -> None:
        await self.store.sync_queue(batch)

    @activity.defn(name=ACTIVITY_ADMISSION_CLOSED)
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
