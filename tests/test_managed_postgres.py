"""A managed Postgres: behind PgBouncer in transaction mode, and with an application role that
may not change the schema (migrations are a deploy step, `agentrun migrate`, run as its owner).

The mirror tests of tests/test_run_happy_path.py run here again through PgBouncer, with
AGENTRUN_PREPARED_STATEMENTS=0.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest
from psycopg import AsyncConnection
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool

import agentrun.demo
from agentrun.core.errors import SetupError
from agentrun.core.settings import Settings
from agentrun.ops import operations as ops
from agentrun.store.db import MIGRATIONS, install_tool_schema, open_pool
from agentrun.workflows import AgentRunWorkflow
from tests.conftest import running_worker
from tests.support import make_spec, wait_pending
from tests.test_run_happy_path import (
    test_run_completes_with_receipt_and_mirror as test_through_pgbouncer_a_run_and_its_mirror,
)
from tests.test_run_happy_path import (
    test_sql_answers_what_a_run_did_and_cost as test_through_pgbouncer_sql_answers,
)

__all__ = ["test_through_pgbouncer_a_run_and_its_mirror", "test_through_pgbouncer_sql_answers"]

NO_PREPARED = Settings.read({"AGENTRUN_PREPARED_STATEMENTS": "0"}).prepared_statements


@pytest.fixture
async def pool(pgbouncer: str) -> AsyncIterator[AsyncConnectionPool]:
    """Every connection of these tests' workers and checks goes through PgBouncer."""
    pool = await open_pool(pgbouncer, max_size=20, prepared_statements=NO_PREPARED)
    await install_tool_schema(pool, agentrun.demo.registry.schema())
    yield pool
    await pool.close()


@pytest.fixture
def settings(settings: Settings, pgbouncer: str) -> Settings:
    return settings.model_copy(update={"database_url": pgbouncer, "prepared_statements": False})


async def test_prepared_statements_break_behind_pgbouncer_unless_turned_off(pgbouncer):
    """Two clients whose statements share one server connection (database `tight`): with
    prepared statements each prepares `_pg3_0` there and the second is refused; without,
    both run."""
    tight = pgbouncer.rsplit("/", 1)[0] + "/tight"

    async def two_clients(prepared: bool) -> list[int]:
        pool = await open_pool(tight, max_size=2, prepared_statements=prepared)
        try:
            async with pool.connection() as a, pool.connection() as b:
                seen = []
                for conn in (a, b, a, b, a, b):
                    cur = await conn.execute("SELECT %s::int + 1", (len(seen),))
                    row = await cur.fetchone()
                    assert row is not None
                    seen.append(row[0])
                return seen
        finally:
            await pool.close()

    with pytest.raises(psycopg.errors.DuplicatePreparedStatement):
        await two_clients(prepared=True)
    assert NO_PREPARED is False
    assert await two_clients(prepared=NO_PREPARED) == [1, 2, 3, 4, 5, 6]


def migrate(database_url: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTRUN_", "TEMPORAL_"))}
    return subprocess.run(
        [sys.executable, "-m", "agentrun", "migrate", "--wait", "30"],
        env={**env, "DATABASE_URL": database_url, "AGENTRUN_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=180,
    )


async def test_a_worker_without_ddl_rights_starts_on_a_migrated_schema_only(
    database_url, client, settings, tmp_path
):
    """The application role may read and write, not create: on a fresh database its worker
    refuses, naming `agentrun migrate`; after the owner runs `agentrun migrate` (the deploy
    step) and grants it the tables, its worker starts and a run completes."""
    suffix = uuid.uuid4().hex[:8]
    database, role = f"managed_{suffix}", f"app_{suffix}"
    async with await AsyncConnection.connect(database_url, autocommit=True) as admin:
        await admin.execute(f"CREATE DATABASE {database}")
        await admin.execute(f"CREATE ROLE {role} LOGIN")
    owner_url = make_conninfo(database_url, dbname=database)
    app_url = make_conninfo(database_url, dbname=database, user=role)
    async with await AsyncConnection.connect(owner_url, autocommit=True) as owner:
        await owner.execute(f"REVOKE CREATE ON SCHEMA public FROM PUBLIC, {role}")

    with pytest.raises(
        SetupError, match=r"at version 0, this code needs .* may not change it .*`agentrun migrate`"
    ):
        await open_pool(app_url)

    done = migrate(owner_url, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"the schema is at version {len(MIGRATIONS)}"
    async with await AsyncConnection.connect(owner_url, autocommit=True) as owner:
        await owner.execute(
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}"
        )
        await owner.execute(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {role}")

    pool = await open_pool(app_url, max_size=10)
    try:
        app = settings.model_copy(update={"database_url": app_url})
        async with running_worker(client, app, pool):
            started = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
            pending = await wait_pending(client, started.run_id)
            assert pending.tool == "send_message"
            await ops.approve(client, started.run_id, by="maria", role="approver")
            result = await handle.result()
        assert result.status.value == "completed"
        async with pool.connection() as conn:
            cur = await conn.execute("SELECT status FROM runs WHERE run_id = %s", (started.run_id,))
            assert await cur.fetchone() == ("completed",)
    finally:
        await pool.close()
