"""All SQL for the backlog mirror: what the workflow writes, and what people read.

The backlog workflow is the truth; these rows are its mirror. Every write is an upsert keyed
by (agent, task_key) and carries the workflow's version, so a retried or late write never
adds a row and never takes a row backwards.
"""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from agentledger.core._state import RunInput
from agentledger.core.backlog_models import (
    BacklogLoadResult,
    BacklogPolicy,
    BacklogSyncInput,
    BacklogTask,
)
from agentledger.core.spec import JsonDict

TASK_COLUMNS = """t.ordinal, t.task_key, t.title, t.state, t.attempts, t.max_attempts,
    t.last_error, t.run_id, r.status AS run_status, r.current_step_id,
    coalesce(r.checkpoint, '{}'::jsonb) AS checkpoint, s.checkpoint AS step_checkpoint,
    t.enqueued_at, t.started_at, t.finished_at, t.updated_at"""
# With a tenant (the second and third parameters), only its tasks; with None, every task. A
# task whose spec is not mirrored yet has no known tenant, so no tenant sees it.
TASK_OF_TENANT = "(%s::text IS NULL OR t.spec->>'tenant' = %s::text)"


class BacklogStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    # ------------------------------------------------------------ written by the workflow

    async def sync(self, batch: BacklogSyncInput) -> None:
        """Apply one snapshot of the backlog: one transaction, idempotent, never backwards."""
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(
                """
                INSERT INTO backlogs (agent, version, status, stop_reason, policy, generation,
                                      updated_at)
                VALUES (%(agent)s, %(version)s, %(status)s, %(reason)s, %(policy)s,
                        %(generation)s, %(updated)s)
                ON CONFLICT (agent) DO UPDATE SET
                    version = EXCLUDED.version, status = EXCLUDED.status,
                    stop_reason = EXCLUDED.stop_reason, policy = EXCLUDED.policy,
                    generation = EXCLUDED.generation, updated_at = EXCLUDED.updated_at
                WHERE backlogs.version < EXCLUDED.version
                """,
                {
                    "agent": batch.agent,
                    "version": batch.version,
                    "status": "stopped" if batch.stopped else "active",
                    "reason": batch.stop_reason,
                    "policy": Jsonb(batch.policy.model_dump(mode="json")),
                    "generation": batch.generation,
                    "updated": batch.updated_at,
                },
            )
            if not batch.tasks:
                return
            params = [
                {
                    **task.model_dump(exclude={"spec"}),
                    "agent": batch.agent,
                    "spec": Jsonb(task.spec) if task.spec is not None else None,
                    "version": batch.version,
                    "updated": batch.updated_at,
                }
                for task in batch.tasks
            ]
            async with conn.cursor() as cur:
                await cur.executemany(
                    """
                    INSERT INTO backlog_tasks (agent, task_key, ordinal, title, spec, state,
                        attempts, max_attempts, launches, last_error, run_id, version,
                        enqueued_at, started_at, finished_at, updated_at)
                    VALUES (%(agent)s, %(key)s, %(ordinal)s, %(title)s, %(spec)s, %(state)s,
                        %(attempts)s, %(max_attempts)s, %(launches)s, %(last_error)s,
                        %(run_id)s, %(version)s, %(enqueued_at)s, %(started_at)s,
                        %(finished_at)s, %(updated)s)
                    ON CONFLICT (agent, task_key) DO UPDATE SET
                        ordinal = EXCLUDED.ordinal, title = EXCLUDED.title,
                        spec = coalesce(EXCLUDED.spec, backlog_tasks.spec),
                        state = EXCLUDED.state, attempts = EXCLUDED.attempts,
                        max_attempts = EXCLUDED.max_attempts, launches = EXCLUDED.launches,
                        last_error = EXCLUDED.last_error, run_id = EXCLUDED.run_id,
                        version = EXCLUDED.version, started_at = EXCLUDED.started_at,
                        finished_at = EXCLUDED.finished_at, updated_at = EXCLUDED.updated_at
                    WHERE backlog_tasks.version < EXCLUDED.version
                    """,
                    params,
                )
                # The spec travels once; should a newer write have landed first, fill it in.
                await cur.executemany(
                    """UPDATE backlog_tasks SET spec = %(spec)s
                       WHERE agent = %(agent)s AND task_key = %(key)s AND spec IS NULL""",
                    [p for p in params if p["spec"] is not None],
                )

    async def load(self, agent: str) -> BacklogLoadResult:
        """The mirrored backlog, for a fresh workflow whose predecessor is gone."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """SELECT b.version, b.policy, b.status, b.stop_reason, b.generation,
                          coalesce(max(t.version), 0), coalesce(max(t.ordinal), 0),
                          coalesce(array_agg(t.task_key ORDER BY t.ordinal)
                                   FILTER (WHERE t.state = 'done'), '{}')
                   FROM backlogs b LEFT JOIN backlog_tasks t USING (agent)
                   WHERE b.agent = %s GROUP BY b.agent""",
                (agent,),
            )
            head = await cur.fetchone()
            if head is None:
                return BacklogLoadResult(found=False)
            cur = await conn.execute(
                """SELECT task_key, title, ordinal, state, attempts, max_attempts, launches,
                          run_id, last_error, spec, enqueued_at, started_at, finished_at
                   FROM backlog_tasks WHERE agent = %s AND state <> 'done' ORDER BY ordinal""",
                (agent,),
            )
            rows = await cur.fetchall()
        tasks = [
            BacklogTask(
                key=r[0],
                title=r[1],
                ordinal=r[2],
                state=r[3],
                attempts=r[4],
                max_attempts=r[5],
                launches=r[6],
                run_id=r[7],
                last_error=r[8],
                spec=RunInput.model_validate(r[9]) if r[9] else None,
                enqueued_at=r[10],
                started_at=r[11],
                finished_at=r[12],
            )
            for r in rows
        ]
        return BacklogLoadResult(
            found=True,
            version=max(int(head[0]), int(head[5])),
            policy=BacklogPolicy.model_validate(head[1]),
            stopped=head[2] == "stopped",
            stop_reason=head[3],
            generation=int(head[4]),
            next_ordinal=int(head[6]) + 1,
            tasks=tasks,
            done_keys=list(head[7]),
        )

    # ------------------------------------------------------------ read by people

    async def backlog(self, agent: str) -> JsonDict | None:
        rows = await self._rows(
            """SELECT agent, status, stop_reason, policy, generation, updated_at
               FROM backlogs WHERE agent = %s""",
            agent,
        )
        return rows[0] if rows else None

    async def tasks(self, agent: str, *, tenant: str | None = None) -> list[JsonDict]:
        """Every task in order (with `tenant`, that tenant's alone), with its run's live
        status, step and checkpoint."""
        return await self._rows(
            f"""SELECT {TASK_COLUMNS} FROM backlog_tasks t
                LEFT JOIN runs r ON r.run_id = t.run_id
                LEFT JOIN steps s ON s.run_id = t.run_id AND s.step_id = r.current_step_id
                WHERE t.agent = %s AND {TASK_OF_TENANT} ORDER BY t.ordinal""",
            agent,
            tenant,
            tenant,
        )

    async def dead_letters(self, agent: str, *, tenant: str | None = None) -> list[JsonDict]:
        return await self._rows(
            f"""SELECT d.ordinal, d.task_key, d.title, d.attempts, d.max_attempts,
                       d.last_error, d.run_id, d.finished_at
                FROM backlog_dead_letters d
                JOIN backlog_tasks t ON t.agent = d.agent AND t.task_key = d.task_key
                WHERE d.agent = %s AND {TASK_OF_TENANT} ORDER BY d.ordinal""",
            agent,
            tenant,
            tenant,
        )

    async def task_tenants(self, agent: str) -> dict[str, str | None]:
        """Each task's tenant, as its spec names it (None while its spec is not mirrored)."""
        rows = await self._rows(
            """SELECT task_key, spec->>'tenant' AS tenant FROM backlog_tasks
               WHERE agent = %s""",
            agent,
        )
        return {r["task_key"]: r["tenant"] for r in rows}

    async def _rows(self, sql: str, *params: Any) -> list[JsonDict]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(sql, params)  # type: ignore[arg-type]
            columns = [c.name for c in cur.description or []]
            return [dict(zip(columns, row, strict=True)) for row in await cur.fetchall()]
