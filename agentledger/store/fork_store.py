"""The SQL of forks: reading a parent's record, copying its conversation, linking the two."""

from __future__ import annotations

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from agentledger.core.spec import JsonDict
from agentledger.core.wire import StepRecord


class ForkStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def record(self, run_id: str) -> tuple[list[StepRecord], list[JsonDict]]:
        """A run's steps (in order) and its stored conversation."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """SELECT step_id, seq, type, name, status, input, output, error, attempt,
                          tokens_in, tokens_out, cost_usd::float, idempotency_key, started_at,
                          finished_at, final
                   FROM steps WHERE run_id = %s ORDER BY seq""",
                (run_id,),
            )
            columns = [c.name for c in cur.description or []]
            steps = [
                StepRecord.model_validate(dict(zip(columns, row, strict=True)))
                for row in await cur.fetchall()
            ]
            cur = await conn.execute(
                "SELECT message FROM conversation WHERE run_id = %s ORDER BY idx", (run_id,)
            )
            messages = [dict(row[0]) for row in await cur.fetchall()]
        return steps, messages

    async def seed(
        self,
        *,
        fork_run_id: str,
        parent_run_id: str,
        from_step: int,
        edited: bool,
        prefix: list[JsonDict],
    ) -> None:
        """Give the fork its starting conversation and link it to its parent, at most once."""
        async with self.pool.connection() as conn, conn.transaction():
            async with conn.cursor() as cur:
                await cur.executemany(
                    """INSERT INTO conversation (run_id, idx, message) VALUES (%s, %s, %s)
                       ON CONFLICT (run_id, idx) DO NOTHING""",
                    [(fork_run_id, i, Jsonb(m)) for i, m in enumerate(prefix)],
                )
            await conn.execute(
                """INSERT INTO run_forks (fork_run_id, parent_run_id, from_step, edited)
                   VALUES (%s, %s, %s, %s) ON CONFLICT (fork_run_id) DO NOTHING""",
                (fork_run_id, parent_run_id, from_step, edited),
            )

    async def forks_of(self, run_id: str) -> list[str]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT fork_run_id FROM run_forks WHERE parent_run_id = %s ORDER BY created_at",
                (run_id,),
            )
            return [row[0] for row in await cur.fetchall()]
