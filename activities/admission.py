"""The admission queue's mirror writes: each run's place in its tenant's queue."""

from __future__ import annotations

from temporalio import activity

from agentrun.core.admission_models import QueueSyncInput
from agentrun.core.constants import ACTIVITY_ADMISSION_SYNC
from agentrun.store.tenant_store import TenantStore


class AdmissionActivities:
    def __init__(self, store: TenantStore) -> None:
        self.store = store

    @activity.defn(name=ACTIVITY_ADMISSION_SYNC)
    async def sync(self, batch: QueueSyncInput) -> None:
        await self.store.sync_queue(batch)
