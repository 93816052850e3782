"""All SQL for triggers: the schedules listed in the mirror (each lives in
Temporal as a Schedule) and what became of each fire time; the webhook triggers an admin
made (their secrets are never read back but to verify a delivery) and the deliveries each
took, by id, so a delivery sent again is the run it started.

A fire's row only moves forward (started -> ended), so a retried or late write never takes
it back.
"""

from __future__ import annotations

from typing import Any

from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from agentledger.core.hook_models import HookRow
from agentledger.core.schedule_models import FireRecord, ScheduleRequest

OUTCOME_RANK = "CASE %s WHEN 'started' THEN 0 WHEN 'skipped' THEN 1 ELSE 2 END"


class TriggerStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    # ------------------------------------------------------------ schedules

    async def save_schedule(
        self, tenant: str, request: ScheduleRequest, agent: str, created_by: str
    ) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                """INSERT INTO schedules (tenant, name, agent, task, request, created_by, paused)
                   VALUES (%s, %s, %s, %s, %s, %s, %s)
                   ON CONFLICT (tenant, name) DO UPDATE SET agent = EXCLUDED.agent,
                       task = EXCLUDED.task, request = EXCLUDED.request,
                       paused = EXCLUDED.paused, updated_at = now()""",
                (
                    tenant,
                    request.name,
                    agent,
                    request.task,
                    Jsonb(request.model_dump(mode="json")),
                    created_by,
                    request.paused,
                ),
            )

    async def set_paused(self, tenant: str, name: str, paused: bool) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                """UPDATE schedules SET paused = %s, updated_at = now()
                   WHERE tenant = %s AND name = %s""",
                (paused, tenant, name),
            )

    async def drop_schedule(self, tenant: str, name: str) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                "DELETE FROM schedules WHERE tenant = %s AND name = %s", (tenant, name)
            )

    async def schedules(self, tenant: str | None) -> list[dict[str, Any]]:
        """The schedules of `tenant` (every tenant's: None), each with its last fire."""
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                """SELECT s.tenant, s.name, s.agent, s.task, s.request, s.paused, s.created_by,
                          s.created_at, f.fired_at AS last_fired_at, f.run_id AS last_run_id,
                          f.outcome AS last_outcome
                   FROM schedules s LEFT JOIN LATERAL (
                       SELECT fired_at, run_id, outcome FROM schedule_fires
                       WHERE tenant = s.tenant AND schedule = s.name
                       ORDER BY fired_at DESC LIMIT 1) f ON true
                   WHERE %(tenant)s::text IS NULL OR s.tenant = %(tenant)s
                   ORDER BY s.tenant, s.name""",
                {"tenant": tenant},
            )
            return await cur.fetchall()

    async def record_fire(self, fire: FireRecord) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                f"""INSERT INTO schedule_fires (tenant, schedule, fired_at, run_id, outcome,
                                                reason)
                    VALUES (%(tenant)s, %(schedule)s, %(fired_at)s, %(run_id)s, %(outcome)s,
                            %(reason)s)
                    ON CONFLICT (tenant, schedule, fired_at) DO UPDATE SET
                        run_id = coalesce(EXCLUDED.run_id, schedule_fires.run_id),
                        outcome = EXCLUDED.outcome, reason = EXCLUDED.reason,
                        updated_at = now()
                    WHERE {OUTCOME_RANK % "EXCLUDED.outcome"}
                          >= {OUTCOME_RANK % "schedule_fires.outcome"}""",
                fire.model_dump(),
            )

    async def fires(self, tenant: str, schedule: str, limit: int = 10) -> list[FireRecord]:
        """The schedule's latest fires, newest first."""
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                """SELECT tenant, schedule, fired_at, run_id, outcome, reason
                   FROM schedule_fires WHERE tenant = %s AND schedule = %s
                   ORDER BY fired_at DESC LIMIT %s""",
                (tenant, schedule, limit),
            )
            return [FireRecord.model_validate(row) for row in await cur.fetchall()]

    # ------------------------------------------------------------ webhook triggers

    async def save_hook(self, hook: HookRow, secret: str) -> bool:
        """Add the hook; False if the tenant has one of that name already."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """INSERT INTO hooks (tenant, name, secret, agent, task_template, spec,
                                      created_by)
                   VALUES (%s, %s, %s, %s, %s, %s, %s)
                   ON CONFLICT DO NOTHING""",
                (
                    hook.tenant,
                    hook.name,
                    secret,
                    hook.agent,
                    hook.task_template,
                    Jsonb(hook.spec),
                    hook.created_by,
                ),
            )
            return cur.rowcount == 1

    async def hooks(self, tenant: str | None) -> list[HookRow]:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                """SELECT tenant, name, agent, task_template, spec, created_by, created_at
                   FROM hooks WHERE %(tenant)s::text IS NULL OR tenant = %(tenant)s
                   ORDER BY tenant, name""",
                {"tenant": tenant},
            )
            return [HookRow.model_validate(row) for row in await cur.fetchall()]

    async def hook(self, tenant: str, name: str) -> tuple[HookRow, str] | None:
        """The hook and its secret, to verify a delivery by."""
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                """SELECT tenant, name, agent, task_template, spec, created_by, created_at,
                          secret
                   FROM hooks WHERE tenant = %s AND name = %s""",
                (tenant, name),
            )
            row = await cur.fetchone()
        if row is None:
            return None
        secret = row.pop("secret")
        return HookRow.model_validate(row), secret

    async def drop_hook(self, tenant: str, name: str) -> bool:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "DELETE FROM hooks WHERE tenant = %s AND name = %s", (tenant, name)
            )
            return cur.rowcount == 1

    async def delivered(self, tenant: str, hook: str, delivery_id: str) -> str | None:
        """The run a delivery started, if it was taken before."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """SELECT run_id FROM hook_deliveries
                   WHERE tenant = %s AND hook = %s AND delivery_id = %s""",
                (tenant, hook, delivery_id),
            )
            row = await cur.fetchone()
        return None if row is None else str(row[0])

    async def record_delivery(self, tenant: str, hook: str, delivery_id: str, run_id: str) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                """INSERT INTO hook_deliveries (tenant, hook, delivery_id, run_id)
                   VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING""",
                (tenant, hook, delivery_id, run_id),
            )
