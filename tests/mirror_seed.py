"""A database of its own for a test, and rows written straight into the mirror's tables.

Metrics and retention are about many runs in known shapes; seeding them by hand, in a
fresh database that the migrations built, lets a test count every figure itself.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

import agentledger.demo
from agentledger.store.db import install_tool_schema, open_pool

REPO = Path(__file__).resolve().parent.parent


@asynccontextmanager
async def fresh_database(
    database_url: str, prefix: str
) -> AsyncIterator[tuple[str, AsyncConnectionPool]]:
    """A new, migrated database on the session's Postgres: its URL and a pool on it."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin:
        await admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = make_conninfo(database_url, dbname=name)
    pool = await open_pool(url, max_size=4)
    # The tables a demo worker would bring: seeded runs sent messages and opened tickets.
    await install_tool_schema(pool, agentledger.demo.registry.schema())
    try:
        yield url, pool
    finally:
        await pool.close()
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as admin:
            await admin.execute(
                sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name))
            )


@dataclass
class Seeder:
    pool: AsyncConnectionPool

    async def _insert(self, table: str, **values: Any) -> None:
        query = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
            sql.Identifier(table),
            sql.SQL(", ").join(map(sql.Identifier, values)),
            sql.SQL(", ").join(sql.Placeholder() * len(values)),
        )
        params = [Jsonb(v) if isinstance(v, dict | list) else v for v in values.values()]
        async with self.pool.connection() as conn:
            await conn.execute(query, params)

    async def run(
        self,
        run_id: str,
        status: str,
        created_at: datetime,
        *,
        seconds: float | None = None,
        cost_usd: float = 0.0,
        tenant: str = "acme",
    ) -> None:
        """A run that started at `created_at` and, if `seconds` is given, ended after it."""
        finished = created_at + timedelta(seconds=seconds) if seconds is not None else None
        await self._insert(
            "runs",
            run_id=run_id,
            version=1,
            tenant=tenant,
            user_id="ana",
            task=f"task of {run_id}",
            status=status,
            cost_usd=cost_usd,
            created_at=created_at,
            updated_at=finished or created_at,
            finished_at=finished,
        )

    async def step(
        self,
        run_id: str,
        step_id: str,
        type: str,
        name: str,
        status: str,
        *,
        started_at: datetime,
        seconds: float | None = 1.0,
        final: bool = True,
        attempts: tuple[str, ...] = (),
        input: dict[str, Any] | None = None,
        output: Any = None,
    ) -> None:
        """A step, and one `step_attempts` row per status in `attempts` (attempt 1, 2, ...)."""
        finished = started_at + timedelta(seconds=seconds) if seconds is not None else None
        await self._insert(
            "steps",
            run_id=run_id,
            step_id=step_id,
            seq=int(step_id.rsplit("-", 1)[-1]),
            type=type,
            name=name,
            status=status,
            attempt=max(len(attempts), 1),
            final=final,
            input=input or {},
            output=output,
            started_at=started_at,
            finished_at=finished,
        )
        for number, attempt_status in enumerate(attempts, start=1):
            await self._insert(
                "step_attempts",
                run_id=run_id,
                step_id=step_id,
                attempt=number,
                worker=f"worker-{number}",
                status=attempt_status,
                error="boom" if attempt_status == "failed" else None,
            )

    async def ledger(
        self, run_id: str, step_id: str, tool: str, *, duplicates: int, key: str | None = None
    ) -> None:
        await self._insert(
            "tool_ledger",
            idempotency_key=key or f"{run_id}:{step_id}",
            run_id=run_id,
            step_id=step_id,
            tool=tool,
            status="done",
            result={"ok": True},
            attempt=1,
            duplicates_prevented=duplicates,
        )

    async def row(self, table: str, **values: Any) -> None:
        await self._insert(table, **values)


async def starter(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    """`python starter.py ARGS` with only `env` for settings: its exit code, stdout, stderr."""
    inherited = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("AGENTLEDGER_") and k != "DATABASE_URL"
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "starter.py",
        *args,
        cwd=REPO,
        env={**inherited, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    return proc.returncode or 0, out.decode(), err.decode()
