"""A schedule's fires as the mirror keeps them: `schedules.record_fire`, one row per fire
time, moving forward only (started, then ended; or skipped, and why)."""

from __future__ import annotations

from temporalio import activity

from agentledger.core.constants import ACTIVITY_SCHEDULE_RECORD_FIRE
from agentledger.core.schedule_models import FireRecord
from agentledger.store.trigger_store import TriggerStore


class ScheduleActivities:
    def __init__(self, store: TriggerStore) -> None:
        self.store = store

    @activity.defn(name=ACTIVITY_SCHEDULE_RECORD_FIRE)
    async def record_fire(self, fire: FireRecord) -> None:
        await self.store.record_fire(fire)
