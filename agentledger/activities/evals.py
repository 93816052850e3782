"""`eval.diverged`: the eval workflow's watch on a case's run, until it stops or ends.

A case's run that calls what its recording lacks is paused by its tool step (the tool
activity records the divergence, agentledger.store.eval_store); this activity says so once
that divergence is in Postgres, and the eval workflow then ends the run. It ends as well
when the mirror shows the run ended, so no watch outlives its case by more than a look.
Meanwhile it heartbeats, so a worker's death moves it to another worker.
"""

from __future__ import annotations

import asyncio

from psycopg_pool import AsyncConnectionPool
from temporalio import activity

from agentledger.core.constants import ACTIVITY_EVAL_DIVERGED
from agentledger.store import eval_store

# How often the watch looks; it heartbeats as often.
WATCH_SECONDS = 0.5


class EvalActivities:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    @activity.defn(name=ACTIVITY_EVAL_DIVERGED)
    async def diverged(self, run_id: str) -> bool:
        """True when the case's run diverged where the case stops; False when it ended."""
        while True:
            found, ended = await eval_store.watched(self.pool, run_id)
            if found is not None and found.stopped:
                return True
            if ended:
                return False
            activity.heartbeat()
            await asyncio.sleep(WATCH_SECONDS)
