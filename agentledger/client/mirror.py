"""`client.mirror`: the Postgres mirror of the caller's runs: checked against and rebuilt
from Temporal's histories, summed into fleet figures, pruned."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agentledger.client import projection
from agentledger.client.scope import Scope
from agentledger.core.errors import OperationError, OperationRefused
from agentledger.core.fleet_figures import PruneResult, Stats
from agentledger.core.run_reports import MirrorCheck
from agentledger.store import metrics, retention
from agentledger.store.mirror_store import MirrorStore
from agentledger.temporal.worker_presence import Deadline


class Mirror:
    """What the mirror holds of the caller's runs (every tenant's, for an operator)."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    async def check(self, run_id: str) -> MirrorCheck:
        """Compare the run's mirror rows with those its Temporal history derives."""
        scope = self.scope
        running = (await scope.find_run(run_id, Deadline(scope.wait))).running
        found = await projection.check(
            await scope.temporal(),
            await scope.database(),
            run_id,
            payload_limit=scope.config.payload_limit_bytes,
        )
        counts = {kind: sum(d.kind == kind for d in found) for kind in projection.KINDS}
        return MirrorCheck(
            run_id=run_id,
            open=running,
            agrees=not found,
            counts=counts,
            differences=[str(d) for d in found],
        )

    async def rebuild(self, run_id: str) -> MirrorCheck:
        """Rewrite an ended run's mirror rows from its Temporal history, then check them."""
        scope = self.scope
        found = await scope.find_run(run_id, Deadline(scope.wait))
        if found.running:
            raise OperationRefused(
                f"run {run_id} is still running and keeps writing its mirror; rebuild it once "
                f"it ends (`agentledger mirror check {run_id}` compares it now)"
            )
        derived = await projection.project(
            await scope.temporal(), run_id, payload_limit=scope.config.payload_limit_bytes
        )
        if derived.run is None:
            raise OperationError(f"run {run_id}'s history holds no mirror write to rebuild from")
        await MirrorStore(await scope.database()).rebuild(derived.batch(), derived.receipt)
        return await self.check(run_id)

    async def stats(self, *, since: datetime | None = None) -> Stats:
        """Fleet figures: cost per completed run, failures, waits."""
        return await metrics.stats(
            await self.scope.database(), since=since, tenant=self.scope.tenant
        )

    async def prune(self, *, older_than: timedelta, dry_run: bool = False) -> PruneResult:
        """Delete what runs that finished longer ago than `older_than` recorded: the
        caller's tenant's alone under one, every tenant's for an operator."""
        return await retention.prune(
            await self.scope.database(),
            cutoff=datetime.now(UTC) - older_than,
            dry_run=dry_run,
            tenant=self.scope.tenant,
        )
