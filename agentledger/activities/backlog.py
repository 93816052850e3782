"""Mirror writes and reads the backlog workflow asks for."""

from __future__ import annotations

from temporalio import activity

from agentledger.core.backlog_models import BacklogLoadInput, BacklogLoadResult, BacklogSyncInput
from agentledger.core.constants import ACTIVITY_BACKLOG_LOAD, ACTIVITY_BACKLOG_SYNC
from agentledger.store.backlog_store import BacklogStore


class BacklogActivities:
    def __init__(self, store: BacklogStore) -> None:
        self.store = store

    @activity.defn(name=ACTIVITY_BACKLOG_SYNC)
    async def sync(self, input: BacklogSyncInput) -> None:
        await self.store.sync(input)

    @activity.defn(name=ACTIVITY_BACKLOG_LOAD)
    async def load(self, input: BacklogLoadInput) -> BacklogLoadResult:
        """Only a fresh workflow asks: its predecessor was terminated, the mirror remembers."""
        return await self.store.load(input.agent)
