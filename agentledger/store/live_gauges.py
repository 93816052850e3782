"""What the fleet's gauges read from the mirror: approvals waiting for a person, and how
long the oldest has waited. A gauge is a fleet-wide figure, so it is read where every run's
state meets (the mirror), not added up from runs; every worker publishes the same value."""

from __future__ import annotations

from typing import Any

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

PENDING_APPROVALS_SQL = """
SELECT r.tenant, count(*) AS pending,
       extract(epoch FROM now() - min(coalesce(s.started_at, s.updated_at)))::float
           AS oldest_seconds
FROM steps s JOIN runs r USING (run_id)
WHERE s.type = 'approval' AND s.status = 'waiting'
GROUP BY r.tenant
"""


async def pending_approvals(pool: AsyncConnectionPool) -> list[dict[str, Any]]:
    """Per tenant with approvals waiting: how many, and the oldest's age in seconds."""
    async with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(PENDING_APPROVALS_SQL)
        return list(await cur.fetchall())
