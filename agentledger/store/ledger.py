"""The idempotency ledger: one row per side-effecting call, keyed by its idempotency key.

A side effect and its ledger row commit in one transaction. A retry that finds the row
returns the recorded result instead of acting again, and counts one duplicate prevented.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool


async def claim(
    conn: AsyncConnection[Any], *, key: str, run_id: str, step_id: str, tool: str, attempt: int
) -> tuple[bool, Any]:
    """Claim the key inside the caller's transaction: (True, None) to act, or (False, result).

    A concurrent claimer blocks on the unique key until the first transaction ends, so two
    attempts (a zombie and its retry) can never both act.
    """
    cur = await conn.execute(
        """INSERT INTO tool_ledger (idempotency_key, run_id, step_id, tool, status, attempt)
           VALUES (%s, %s, %s, %s, 'started', %s)
           ON CONFLICT (idempotency_key) DO NOTHING RETURNING idempotency_key""",
        (key, run_id, step_id, tool, attempt),
    )
    if await cur.fetchone():
        return True, None
    cur = await conn.execute(
        """UPDATE tool_ledger SET duplicates_prevented = duplicates_prevented + 1,
                  last_duplicate_at = now()
           WHERE idempotency_key = %s RETURNING result""",
        (key,),
    )
    row = await cur.fetchone()
    return False, row[0] if row else None


async def complete(
    conn: AsyncConnection[Any], *, key: str, result: Any, reconciliation: str | None = None
) -> None:
    await conn.execute(
        """UPDATE tool_ledger SET status = 'done', result = %s,
                  reconciliation = coalesce(%s, reconciliation),
                  reconciled_at = CASE WHEN %s::text IS NULL THEN reconciled_at ELSE now() END
           WHERE idempotency_key = %s""",
        (Jsonb(result), reconciliation, reconciliation, key),
    )


# ---------------------------------------------------------------- effects outside Postgres
#
# An external effect cannot share the ledger's transaction, so its claim is committed first
# ("started") and its result after ("done"). A "started" row that a later attempt finds is
# an unknown outcome: the effect may or may not have happened, and must be reconciled.
# A lock on the key keeps a zombie attempt and its retry from overlapping. It is an advisory
# lock scoped to a transaction that stays open, on a connection of its own, for as long as
# the effect runs: a session lock would outlive its statement under a pooler in transaction
# mode (PgBouncer), which hands the server connection holding it to any other client (who
# would then take the lock again, as its holder) and may run the unlock on another server
# connection, leaving the lock held for ever. A transaction keeps its server connection
# until it ends, and its end (a commit, or a dropped connection) releases the lock.


@asynccontextmanager
async def locked(pool: AsyncConnectionPool, key: str) -> AsyncIterator[bool]:
    """Hold the key's lock for the body, if no one else holds it: yields whether it does."""
    async with pool.connection() as conn, conn.transaction():
        cur = await conn.execute(
            "SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 0))", (key,)
        )
        row = await cur.fetchone()
        yield bool(row and row[0])


async def claim_external(
    conn: AsyncConnection[Any], *, key: str, run_id: str, step_id: str, tool: str, attempt: int
) -> tuple[str, Any]:
    """Commit a claim: ("new", None), ("done", result), or ("started", the step that made
    the unfinished claim) if the outcome is unknown."""
    cur = await conn.execute(
        """INSERT INTO tool_ledger (idempotency_key, run_id, step_id, tool, status, attempt)
           VALUES (%s, %s, %s, %s, 'started', %s)
           ON CONFLICT (idempotency_key) DO NOTHING RETURNING idempotency_key""",
        (key, run_id, step_id, tool, attempt),
    )
    if await cur.fetchone():
        return "new", None
    cur = await conn.execute(
        "SELECT status, result, step_id FROM tool_ledger WHERE idempotency_key = %s", (key,)
    )
    row = await cur.fetchone()
    assert row is not None
    return str(row[0]), row[2] if row[0] == "started" else row[1]


async def reclaim(conn: AsyncConnection[Any], *, key: str, step_id: str, attempt: int) -> None:
    """Take over an unfinished claim before acting again: should this attempt die too, its
    retry finds the claim its own step made, which no earlier decision covers."""
    await conn.execute(
        "UPDATE tool_ledger SET step_id = %s, attempt = %s WHERE idempotency_key = %s",
        (step_id, attempt, key),
    )


async def count_duplicate(conn: AsyncConnection[Any], key: str) -> None:
    await conn.execute(
        """UPDATE tool_ledger SET duplicates_prevented = duplicates_prevented + 1,
                  last_duplicate_at = now() WHERE idempotency_key = %s""",
        (key,),
    )


async def entries(conn: AsyncConnection[Any], keys: list[str]) -> dict[str, tuple[str, Any]]:
    """The ledger's word on these keys: key -> (status, result); absent keys never acted."""
    cur = await conn.execute(
        "SELECT idempotency_key, status, result FROM tool_ledger WHERE idempotency_key = ANY(%s)",
        (keys,),
    )
    return {str(key): (str(status), result) for key, status, result in await cur.fetchall()}
