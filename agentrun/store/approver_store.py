"""Approvers' public keys in Postgres: who may decide, in which role, for which tenant.

Runs copy the keys that apply to them into their approval policy when they start, so the
workflow checks signatures against what was true then, without I/O.
"""

from __future__ import annotations

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from agentrun.core.models import Signer


class ApproverStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def add(self, signer: Signer) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(
                """INSERT INTO approvers (key_id, name, role, tenant, public_key)
                   VALUES (%s, %s, %s, %s, %s)""",
                (signer.key_id, signer.name, signer.role, signer.tenant, signer.public_key),
            )

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
