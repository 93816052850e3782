"""A run's receipt as the mirror holds it: written when the run ended, with what happened to
it since (the forks made of it) and its sandbox executions."""

from __future__ import annotations

from psycopg_pool import AsyncConnectionPool

from agentledger.client.scope import no_run
from agentledger.core.errors import OperationRefused
from agentledger.core.spec import JsonDict
from agentledger.store import mirror_views
from agentledger.store.artifacts import sandbox_executions
from agentledger.store.fork_store import ForkStore


async def receipt_of(
    pool: AsyncConnectionPool, run_id: str, *, tenant: str | None = None
) -> JsonDict:
    """The run's receipt as the mirror holds it, with the forks made of it since and its
    sandbox executions; with `tenant`, only if the run is that tenant's."""
    found = await mirror_views.receipt(pool, run_id, tenant=tenant)
    if found is None:
        raise no_run(run_id)
    receipt, status = found
    if receipt is None:
        raise OperationRefused(
            f"run {run_id} has no receipt yet (status {status}); receipts are written when a "
            "run ends"
        )
    async with pool.connection() as conn:
        # Each run_code execution and the image digest it ran on, from its step's output.
        sandbox = await sandbox_executions(conn, run_id)
    # Forks made after the receipt was written: the link lives in `run_forks`.
    return {
        **receipt,
        "forks": await ForkStore(pool).forks_of(run_id),
        **({"sandbox_executions": sandbox} if sandbox else {}),
    }
