"""The Postgres mirror's schema, declared once, migrated in order on start.

Migrations are an ordered list; each runs once, in its own transaction, under an advisory
lock so that several workers starting together do not race.
"""

from __future__ import annotations

import re
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from agentrun.settings import SetupError

MIGRATION_LOCK = 424242

MIGRATIONS: list[str] = [
    # 1: runs, steps, attempts, events, artifacts, receipts, the idempotency ledger, the outbox.
    """
    CREATE TABLE runs (
        run_id text PRIMARY KEY,
        version bigint NOT NULL,
        tenant text NOT NULL,
        user_id text NOT NULL,
        task text NOT NULL,
        status text NOT NULL,
        current_step_id text,
        model text,
        tokens_in bigint NOT NULL DEFAULT 0,
        tokens_out bigint NOT NULL DEFAULT 0,
        cost_usd numeric(14, 6) NOT NULL DEFAULT 0,
        duplicates_prevented int NOT NULL DEFAULT 0,
        checkpoint jsonb NOT NULL DEFAULT '{}',
        result text,
        error text,
        created_at timestamptz NOT NULL,
        updated_at timestamptz NOT NULL,
        finished_at timestamptz
    );
    CREATE INDEX runs_active_idx ON runs (status)
        WHERE status NOT IN ('completed', 'failed', 'cancelled');
    CREATE INDEX runs_tenant_idx ON runs (tenant, created_at DESC);

    CREATE TABLE steps (
        run_id text NOT NULL,
        step_id text NOT NULL,
        seq int NOT NULL,
        type text NOT NULL,
        name text NOT NULL,
        status text NOT NULL,
        input jsonb NOT NULL DEFAULT '{}',
        output jsonb,
        error text,
        attempt int NOT NULL DEFAULT 1,
        worker text,
        lease_until timestamptz,
        tokens_in bigint NOT NULL DEFAULT 0,
        tokens_out bigint NOT NULL DEFAULT 0,
        cost_usd numeric(14, 6) NOT NULL DEFAULT 0,
        idempotency_key text,
        checkpoint jsonb NOT NULL DEFAULT '{}',
        final boolean NOT NULL DEFAULT false,
        started_at timestamptz,
        finished_at timestamptz,
        updated_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (run_id, step_id)
    );

    CREATE TABLE step_attempts (
        run_id text NOT NULL,
        step_id text NOT NULL,
        attempt int NOT NULL,
        worker text NOT NULL,
        status text NOT NULL,
        error text,
        tokens_in bigint NOT NULL DEFAULT 0,
        tokens_out bigint NOT NULL DEFAULT 0,
        cost_usd numeric(14, 6) NOT NULL DEFAULT 0,
        started_at timestamptz NOT NULL DEFAULT now(),
        finished_at timestamptz,
        PRIMARY KEY (run_id, step_id, attempt)
    );

    CREATE TABLE events (
        run_id text NOT NULL,
        seq int NOT NULL,
        type text NOT NULL,
        step_id text,
        data jsonb NOT NULL DEFAULT '{}',
        created_at timestamptz NOT NULL,
        PRIMARY KEY (run_id, seq)
    );

    CREATE TABLE artifacts (
        artifact_id text PRIMARY KEY,
        run_id text NOT NULL,
        step_id text,
        name text NOT NULL,
        media_type text NOT NULL,
        size_bytes bigint NOT NULL,
        content bytea NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX artifacts_run_idx ON artifacts (run_id);

    CREATE TABLE receipts (
        run_id text PRIMARY KEY,
        outcome text NOT NULL,
        receipt jsonb NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
    );

    CREATE TABLE tool_ledger (
        idempotency_key text PRIMARY KEY,
        run_id text NOT NULL,
        step_id text NOT NULL,
        tool text NOT NULL,
        status text NOT NULL,
        result jsonb,
        attempt int NOT NULL,
        duplicates_prevented int NOT NULL DEFAULT 0,
        created_at timestamptz NOT NULL DEFAULT now(),
        last_duplicate_at timestamptz
    );
    CREATE INDEX tool_ledger_run_idx ON tool_ledger (run_id);

    CREATE TABLE outbox (
        id bigserial PRIMARY KEY,
        idempotency_key text NOT NULL UNIQUE,
        run_id text NOT NULL,
        step_id text NOT NULL,
        recipient text NOT NULL,
        subject text NOT NULL,
        body text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
    );

    -- What is running now, and which worker holds each step until when.
    CREATE VIEW active_steps AS
        SELECT r.run_id, r.tenant, r.status AS run_status, s.step_id, s.type, s.name,
               s.status AS step_status, s.attempt, s.worker, s.lease_until
        FROM runs r JOIN steps s USING (run_id)
        WHERE r.status NOT IN ('completed', 'failed', 'cancelled') AND NOT s.final;

    -- What each run did and cost, step by step.
    CREATE VIEW run_steps AS
        SELECT run_id, seq, step_id, type, name, status, attempt, tokens_in, tokens_out,
               cost_usd, started_at, finished_at
        FROM steps ORDER BY run_id, seq;
    """,
]


async def migrate(conn: AsyncConnection[Any]) -> int:
    """Apply every migration not yet applied; returns the schema version."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        cur = await conn.execute("SELECT coalesce(max(version), 0) FROM schema_migrations")
        row = await cur.fetchone()
        current = int(row[0]) if row else 0
        for version, sql in enumerate(MIGRATIONS[current:], start=current + 1):
            await conn.execute(sql)  # type: ignore[arg-type]
            await conn.execute("INSERT INTO schema_migrations (version) VALUES (%s)", (version,))
    return len(MIGRATIONS)


async def open_pool(
    database_url: str, *, max_size: int = 10, connect_seconds: float = 30
) -> AsyncConnectionPool:
    """Open a pool on a migrated database; every entry point that touches Postgres uses it."""
    pool = AsyncConnectionPool(
        database_url, min_size=1, max_size=max_size, open=False, kwargs={"autocommit": True}
    )
    try:
        await pool.open(wait=True, timeout=connect_seconds)
    except PoolTimeout as err:
        await pool.close()
        raise SetupError(
            f"cannot reach Postgres at {redact(database_url)} within {connect_seconds:.0f}s: check "
            "DATABASE_URL, or start the local stack with `python starter.py up`"
        ) from err
    async with pool.connection() as conn:
        await migrate(conn)
    return pool


def redact(database_url: str) -> str:
    """The URL without its password, for messages and logs."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", database_url)
