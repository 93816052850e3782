"""Approvers' public keys in Postgres: who may decide, in which role, for which tenant.

Runs copy the keys that apply to them into their approval policy when they start, so the
workflow checks signatures against what was true then, without I/O.
"""

from __future__ import annotations

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from agentledger.core.spec import Signer


class ApproverStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def add(self, signer: Signer, *, replace: bool = False) -> bool:
        """Register `signer`; a name is one approver per tenant (or among any-tenant
        approvers). Returns False, registering nothing, when the name is taken there, unless
        `replace`: then its old keys are removed in the same transaction."""
        async with self.pool.connection() as conn, conn.transaction():
            # One writer per (name, tenant) at a time, so two adds cannot both find it free.
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))",
                (f"approver:{signer.tenant or ''}:{signer.name}",),
            )
            if replace:
                await conn.execute(
                    "DELETE FROM approvers WHERE name = %s AND tenant IS NOT DISTINCT FROM %s",
                    (signer.name, signer.tenant),
                )
            else:
                cur = await conn.execute(
                    "SELECT 1 FROM approvers WHERE name = %s AND tenant IS NOT DISTINCT FROM %s",
                    (signer.name, signer.tenant),
                )
                if await cur.fetchone() is not None:
                    return False
            await conn.execute(
                """INSERT INTO approvers (key_id, name, role, tenant, public_key)
                   VALUES (%s, %s, %s, %s, %s)""",
                (signer.key_id, signer.name, signer.role, signer.tenant, signer.public_key),
            )
        return True

    async def taken(self, name: str, tenant: str | None) -> bool:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT 1 FROM approvers WHERE name = %s AND tenant IS NOT DISTINCT FROM %s",
                (name, tenant),
            )
            return await cur.fetchone() is not None

    async def signers(self, tenant: str | None = None) -> list[Signer]:
        """Every approver, or with `tenant` those who may decide its runs (theirs or any)."""
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                """SELECT name, role, tenant, public_key, key_id FROM approvers
                   WHERE %(tenant)s::text IS NULL OR tenant IS NULL OR tenant = %(tenant)s
                   ORDER BY name, created_at""",
                {"tenant": tenant},
            )
            return [Signer.model_validate(row) for row in await cur.fetchall()]

    async def registered_for(self, tenant: str) -> list[Signer]:
        """The approvers registered for `tenant` itself: what its people may list."""
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                """SELECT name, role, tenant, public_key, key_id FROM approvers
                   WHERE tenant = %s ORDER BY name, created_at""",
                (tenant,),
            )
            return [Signer.model_validate(row) for row in await cur.fetchall()]
