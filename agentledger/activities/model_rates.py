"""Which tenants have a model-call rate now, as the model activity on a run's own queue asks.

A run's model calls go to its own queue unless its tenant has a model-call rate
(agentledger.workflows.steering). The run reads that when it starts; a rate set while it
runs reaches its next call here: the activity refuses a call of a rated tenant that came by
the run's own queue (`ModelCallsRated`), before it does anything, and the run sends that
call and every later one through the rate-limited queue. The worker reads the rated tenants
at most once per `RATED_TENANTS_SECONDS`, so a rate holds for a running run's calls from
that long after it is set.
"""

from __future__ import annotations

import asyncio
import time

from agentledger.store.tenant_store import TenantStore

RATED_TENANTS_SECONDS = 1.0


class RatedTenants:
    """The tenants with a model-call rate, read from Postgres when older than the bound."""

    def __init__(self, store: TenantStore, seconds: float = RATED_TENANTS_SECONDS) -> None:
        self._store = store
        self._seconds = seconds
        self._rated: set[str] = set()
        self._read_at: float | None = None
        self._reading = asyncio.Lock()

    def _fresh(self) -> bool:
        return self._read_at is not None and time.monotonic() - self._read_at < self._seconds

    async def has_rate(self, tenant: str) -> bool:
        if not self._fresh():
            async with self._reading:
                if not self._fresh():
                    began = time.monotonic()
                    self._rated = await self._store.rated_tenants()
                    self._read_at = began
        return tenant in self._rated
