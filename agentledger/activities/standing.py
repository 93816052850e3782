"""`approvals.standing`: the standing approvals that may cover a call a person would be
asked about, read from Postgres; the run decides in workflow code whether one covers it
(agentledger.core.standing_approvals), so its history holds what it read."""

from __future__ import annotations

from temporalio import activity

from agentledger.core.constants import ACTIVITY_STANDING_APPROVALS
from agentledger.core.standing_approvals import StandingFound, StandingInput
from agentledger.store.standing_store import StandingStore


class StandingActivities:
    def __init__(self, store: StandingStore) -> None:
        self.store = store

    @activity.defn(name=ACTIVITY_STANDING_APPROVALS)
    async def find(self, input: StandingInput) -> StandingFound:
        return StandingFound(rules=await self.store.live_for(input.tenant, input.tool))
