"""`client.mirror`: the Postgres mirror of the caller's runs: checked against and rebuilt
from Temporal's histories, summed into fleet figures, pruned."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from agentledger.core.fleet_figures import PruneResult, Stats
from agentledger.core.run_reports import MirrorCheck
from agentledger.core.spec import JsonDict
from agentledger.ops import operations as ops
from agentledger.services.client_session import ClientSession
from agentledger.store import metrics, retention


class Mirror:
    """What the mirror holds of the caller's runs (every tenant's, for an operator)."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session

    async def check(self, run_id: str) -> MirrorCheck:
        """Compare the run's mirror rows with those its Temporal history derives."""
        return await self._against_history(ops.check_mirror, run_id)

    async def rebuild(self, run_id: str) -> MirrorCheck:
        """Rewrite an ended run's mirror rows from its history, then check them."""
        return await self._against_history(ops.rebuild_mirror, run_id)

    async def _against_history(
        self, operation: Callable[..., Awaitable[JsonDict]], run_id: str
    ) -> MirrorCheck:
        session = self.session
        checked = await operation(
            await session.temporal(),
            await session.database(),
            run_id,
            payload_limit=session.settings.payload_limit_bytes,
            tenant=session.tenant,
        )
        return MirrorCheck.model_validate(checked)

    async def stats(self, *, since: datetime | None = None) -> Stats:
        """Fleet figures: cost per completed run, failures, waits."""
        return await metrics.stats(
            await self.session.database(), since=since, tenant=self.session.tenant
        )

    async def prune(self, *, older_than: timedelta, dry_run: bool = False) -> PruneResult:
        """Delete what runs that finished longer ago than `older_than` recorded: the
        caller's tenant's alone under one, every tenant's for an operator."""
        return await retention.prune(
            await self.session.database(),
            cutoff=datetime.now(UTC) - older_than,
            dry_run=dry_run,
            tenant=self.session.tenant,
        )
