"""The HTTP door's API keys in Postgres: each key's tenant, role, expiry and revocation,
and the sha256 of the key (agentledger.core.access), never the key itself."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

COLUMNS = "key_id, name, tenant, role, approval_roles, created_at, expires_at, revoked_at"


class ApiKeyStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def add(
        self,
        key_id: str,
        tenant: str,
        role: str,
        key_hash: str,
        expires_at: datetime | None,
        name: str | None,
        approval_roles: list[str] | None = None,
    ) -> dict[str, Any]:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                f"""INSERT INTO api_keys (key_id, tenant, role, key_hash, expires_at, name,
                                          approval_roles)
                    VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING {COLUMNS}""",
                (key_id, tenant, role, key_hash, expires_at, name, approval_roles or []),
            )
            row = await cur.fetchone()
            assert row is not None
            return row

    async def find(self, key_id: str) -> dict[str, Any] | None:
        """The key's row with its hash, for checking a presented key."""
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                f"SELECT {COLUMNS}, key_hash FROM api_keys WHERE key_id = %s", (key_id,)
            )
            return await cur.fetchone()

    async def listed(self) -> list[dict[str, Any]]:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(f"SELECT {COLUMNS} FROM api_keys ORDER BY tenant, created_at")
            return await cur.fetchall()

    async def live(self, key_ids: list[str]) -> set[str]:
        """Those of `key_ids` neither revoked nor expired."""
        async with self.pool.connection() as conn, conn.cursor() as cur:
            await cur.execute(
                """SELECT key_id FROM api_keys WHERE key_id = ANY(%s)
                   AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())""",
                (key_ids,),
            )
            return {row[0] for row in await cur.fetchall()}

    async def revoke(self, key_id: str) -> dict[str, Any] | None:
        """Revoke the key (kept, so `keys list` shows when); None if there is no such key."""
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(
                f"""UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
                    WHERE key_id = %s RETURNING {COLUMNS}""",
                (key_id,),
            )
            return await cur.fetchone()
