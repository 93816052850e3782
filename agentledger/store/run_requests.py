"""The request each idempotency key named: a run's id and the fingerprint of the request that
started it (agentledger.client.starts, `request_fingerprint`), so the same key with another
request is refused instead of answering the first run as if it were the new one."""

from __future__ import annotations

from psycopg_pool import AsyncConnectionPool


class RunRequestStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def claim(self, run_id: str, tenant: str, fingerprint: str) -> str | None:
        """Record `fingerprint` as the request naming `run_id`: None when this is the first,
        else the fingerprint the first recorded (of two at once, one is first)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """INSERT INTO run_requests (run_id, tenant, fingerprint) VALUES (%s, %s, %s)
                   ON CONFLICT (run_id) DO NOTHING RETURNING 1""",
                (run_id, tenant, fingerprint),
            )
            if await cur.fetchone() is not None:
                return None
            # A statement of its own: it sees the first's row even if it committed just now.
            cur = await conn.execute(
                "SELECT fingerprint FROM run_requests WHERE run_id = %s", (run_id,)
            )
            row = await cur.fetchone()
        return fingerprint if row is None else str(row[0])

    async def release(self, run_id: str) -> None:
        """Forget the request of a run that did not start."""
        async with self.pool.connection() as conn:
            await conn.execute("DELETE FROM run_requests WHERE run_id = %s", (run_id,))
