"""The idempotency ledger: one row per side-effecting call, keyed by its idempotency key.

A side effect and its ledger row commit in one transaction. A retry that finds the row
returns the recorded result instead of acting again, and counts one duplicate prevented.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from agentrun.models import JsonDict


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def idempotency_key(run_id: str, step_id: str, tool: str, arguments: JsonDict) -> str:
    digest = hashlib.sha256(canonical_json([run_id, step_id, tool, arguments]).encode())
    return f"{tool}:{digest.hexdigest()[:32]}"


def action_hash(tool: str, arguments: JsonDict) -> str:
    """What an approval is bound to: this tool with exactly these arguments."""
    return hashlib.sha256(canonical_json([tool, arguments]).encode()).hexdigest()[:16]


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


async def complete(conn: AsyncConnection[Any], *, key: str, result: Any) -> None:
    await conn.execute(
        "UPDATE tool_ledger SET status = 'done', result = %s WHERE idempotency_key = %s",
        (Jsonb(result), key),
    )
