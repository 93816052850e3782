"""Which tools the workers on each task queue have, kept in Postgres.

Every worker on a task queue must be able to run every step queued there, so workers with
different tool sets may not share one: a worker whose tools differ from those of a live
worker on its queue refuses to start, and says which queue to use instead. The starter reads
the same rows to refuse a run that names a tool no worker has, before it starts.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Sequence

from psycopg_pool import AsyncConnectionPool

from agentledger.core.errors import ToolSetConflict

# A worker renews its row this often; a row older than LIVE_SECONDS is a worker that is gone.
BEAT_SECONDS = 10.0
LIVE_SECONDS = 30.0


def fingerprint(tools: Sequence[str]) -> str:
    return hashlib.sha256(json.dumps(sorted(tools)).encode()).hexdigest()[:16]


async def join(pool: AsyncConnectionPool, task_queue: str, worker: str, tools: list[str]) -> None:
    """Record this worker's tools on the queue, unless a live worker there has others."""
    mine = fingerprint(tools)
    async with pool.connection() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (task_queue,))
        cur = await conn.execute(
            """SELECT worker, tools FROM worker_tool_sets
               WHERE task_queue = %s AND worker <> %s AND fingerprint <> %s
                 AND seen_at > now() - make_interval(secs => %s)
               ORDER BY seen_at DESC LIMIT 1""",
            (task_queue, worker, mine, LIVE_SECONDS),
        )
        row = await cur.fetchone()
        if row is not None:
            other, theirs = row[0], set(row[1])
            missing, extra = sorted(theirs - set(tools)), sorted(set(tools) - theirs)
            raise ToolSetConflict(
                f"task queue {task_queue!r} is served by worker {other} with other tools "
                f"(it has {missing or 'nothing'} this one lacks; this one adds "
                f"{extra or 'nothing'}): give this worker its own AGENTLEDGER_TASK_QUEUE, or the "
                "same --tools and --mcp"
            )
        await conn.execute(
            """INSERT INTO worker_tool_sets (task_queue, worker, fingerprint, tools)
               VALUES (%s, %s, %s, %s)
               ON CONFLICT (task_queue, worker) DO UPDATE
               SET fingerprint = excluded.fingerprint, tools = excluded.tools, seen_at = now()""",
            (task_queue, worker, mine, json.dumps(sorted(tools))),
        )


async def keep_alive(pool: AsyncConnectionPool, task_queue: str, worker: str) -> None:
    """Renew the worker's row until cancelled; a database outage only delays a beat."""
    while True:
        await asyncio.sleep(BEAT_SECONDS)
        try:
            async with pool.connection() as conn:
                await conn.execute(
                    "UPDATE worker_tool_sets SET seen_at = now() "
                    "WHERE task_queue = %s AND worker = %s",
                    (task_queue, worker),
                )
        except Exception:  # the next beat tries again; the worker goes on serving
            continue


async def leave(pool: AsyncConnectionPool, task_queue: str, worker: str) -> None:
    async with pool.connection() as conn:
        await conn.execute(
            "DELETE FROM worker_tool_sets WHERE task_queue = %s AND worker = %s",
            (task_queue, worker),
        )


async def served_tools(pool: AsyncConnectionPool, task_queue: str) -> list[str] | None:
    """The tools of the queue's workers: those of the most recently seen one; None if no
    worker has ever served it."""
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT tools FROM worker_tool_sets WHERE task_queue = %s "
            "ORDER BY seen_at DESC LIMIT 1",
            (task_queue,),
        )
        row = await cur.fetchone()
    return None if row is None else list(row[0])
