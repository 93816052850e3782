"""All SQL for tenants: their limits (read by every starter) and their admission queues
(written by each tenant's admission workflow, read by people).

Queue rows only move forward (waiting -> admitted -> released), so a retried or late write
never takes a run back in the queue.
"""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from agentledger.core.admission_models import QueueSyncInput, TenantLimits
from agentledger.core.policy_rules import TenantPolicy
from agentledger.core.tenant_policy import RunPolicy
from agentledger.store.approver_store import ApproverStore

LIMIT_COLUMNS = (
    "weight",
    "max_in_flight",
    "max_queued",
    "model_calls_per_second",
    "allowed_priorities",
    "double_texting",
    "schedule_role",
)
STATE_RANK = "CASE %s WHEN 'waiting' THEN 0 WHEN 'admitted' THEN 1 ELSE 2 END"


class TenantStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def limits(self, tenant: str) -> TenantLimits:
        """The tenant's row, or the defaults (no limits) for a tenant nobody configured."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT {', '.join(LIMIT_COLUMNS)} FROM tenants WHERE tenant = %s", (tenant,)
            )
            row = await cur.fetchone()
        if row is None:
            return TenantLimits(tenant=tenant)
        return TenantLimits(tenant=tenant, **dict(zip(LIMIT_COLUMNS, row, strict=True)))

    async def policy(self, tenant: str) -> RunPolicy:
        """The tenant's limits, the operator's rules for its runs, and every approver who may
        decide them (its own and any-tenant ones): what each of its runs carries."""
        return RunPolicy(
            limits=await self.limits(tenant),
            signers=await ApproverStore(self.pool).signers(tenant),
            tenant_policy=await self.rules(tenant),
        )

    async def rules(self, tenant: str) -> TenantPolicy:
        """The operator's policy for the tenant's runs; the defaults for a tenant nobody set."""
        async with self.pool.connection() as conn:
            cur = await conn.execute("SELECT policy FROM tenants WHERE tenant = %s", (tenant,))
            row = await cur.fetchone()
        if row is None or row[0] is None:
            return TenantPolicy()
        return TenantPolicy.model_validate(row[0])

    async def save_rules(self, tenant: str, rules: TenantPolicy) -> None:
        """Set the tenant's policy (its limits stay as they are, or the defaults)."""
        async with self.pool.connection() as conn:
            await conn.execute(
                """INSERT INTO tenants (tenant, policy) VALUES (%s, %s)
                   ON CONFLICT (tenant) DO UPDATE SET policy = EXCLUDED.policy,
                   updated_at = now()""",
                (tenant, Jsonb(rules.model_dump(mode="json"))),
            )

    async def save(self, limits: TenantLimits) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                f"""INSERT INTO tenants (tenant, {", ".join(LIMIT_COLUMNS)})
                    VALUES (%(tenant)s, {", ".join(f"%({c})s" for c in LIMIT_COLUMNS)})
                    ON CONFLICT (tenant) DO UPDATE SET
                    {", ".join(f"{c} = EXCLUDED.{c}" for c in LIMIT_COLUMNS)},
                    updated_at = now()""",
                limits.model_dump(),
            )

    async def rated_tenants(self) -> set[str]:
        """The tenants with a model-call rate now."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT tenant FROM tenants WHERE model_calls_per_second IS NOT NULL"
            )
            return {row[0] for row in await cur.fetchall()}

    async def all_limits(self) -> list[TenantLimits]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                f"SELECT tenant, {', '.join(LIMIT_COLUMNS)} FROM tenants ORDER BY tenant"
            )
            rows = await cur.fetchall()
        return [
            TenantLimits(**dict(zip(("tenant", *LIMIT_COLUMNS), row, strict=True))) for row in rows
        ]

    async def overview(self) -> list[dict[str, Any]]:
        """Every configured or queued tenant: its limits, runs in flight and runs waiting."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                """SELECT coalesce(t.tenant, q.tenant) AS tenant, coalesce(t.weight, 1) AS weight,
                          t.max_in_flight, t.max_queued, t.model_calls_per_second,
                          t.allowed_priorities, t.double_texting,
                          coalesce(q.in_flight, 0) AS in_flight, coalesce(q.queued, 0) AS queued
                   FROM tenants t FULL JOIN (
                       SELECT tenant, count(*) FILTER (WHERE state = 'admitted') AS in_flight,
                              count(*) FILTER (WHERE state = 'waiting') AS queued
                       FROM tenant_queue GROUP BY tenant) q ON q.tenant = t.tenant
                   ORDER BY 1"""
            )
            columns = [c.name for c in cur.description or []]
            return [dict(zip(columns, row, strict=True)) for row in await cur.fetchall()]

    # ------------------------------------------------------------ written by the workflow

    async def sync_queue(self, batch: QueueSyncInput) -> None:
        """Record queue moves in one transaction; a move never goes backwards."""
        async with self.pool.connection() as conn, conn.transaction():
            for row in batch.rows:
                await conn.execute(
                    f"""INSERT INTO tenant_queue (tenant, run_id, seq, state, enqueued_at,
                                                  admitted_at, released_at)
                        VALUES (%(tenant)s, %(run_id)s, %(seq)s, %(state)s,
                                CASE WHEN %(state)s = 'waiting' THEN %(at)s END,
                                CASE WHEN %(state)s = 'admitted' THEN %(at)s END,
                                CASE WHEN %(state)s = 'released' THEN %(at)s END)
                        ON CONFLICT (tenant, run_id) DO UPDATE SET
                            state = EXCLUDED.state,
                            admitted_at = coalesce(tenant_queue.admitted_at,
                                                   EXCLUDED.admitted_at),
                            released_at = coalesce(tenant_queue.released_at,
                                                   EXCLUDED.released_at)
                        WHERE {STATE_RANK % "EXCLUDED.state"}
                              > {STATE_RANK % "tenant_queue.state"}""",
                    row.model_dump(),
                )

    async def position(self, run_id: str) -> int | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT position FROM tenant_queue_positions WHERE run_id = %s", (run_id,)
            )
            row = await cur.fetchone()
        return int(row[0]) if row else None
