"""A managed Postgres: behind PgBouncer in transaction mode, and with an application role that
may not change the schema (migrations are a deploy step, `agentledger migrate`, run as its owner).

The mirror tests of tests/test_run_happy_path.py and the commands' path of tests/test_cli.py
run here again through PgBouncer as it comes (no setting changed), with
AGENTLEDGER_PREPARED_STATEMENTS=0.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest
from psycopg import AsyncConnection
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool

import agentledger.demo
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.errors import SetupError
from agentledger.store import ledger
from agentledger.store.db import MIGRATIONS, install_tool_schema, open_pool
from agentledger.workflows import AgentRunWorkflow
from tests import client_ops as ops
from tests.conftest import running_worker
from tests.support import make_spec, wait_pending
from tests.test_bounded_waits import run_cli
from tests.test_cli import ROOT, cli, cli_env
from tests.test_cli import (
    test_cli_drives_a_run_from_start_to_receipt as test_through_pgbouncer_the_cli_drives_a_run,
)
from tests.test_run_happy_path import (
    test_run_completes_with_receipt_and_mirror as test_through_pgbouncer_a_run_and_its_mirror,
)
from tests.test_run_happy_path import (
    test_sql_answers_what_a_run_did_and_cost as test_through_pgbouncer_sql_answers,
)
from tests.test_unknown_outcomes import (
    test_a_crash_after_an_external_effect_is_reconciled_not_repeated as test_through_pgbouncer_a_crashed_effect_is_reconciled,  # noqa: E501
)

__all__ = [
    "cli",
    "test_through_pgbouncer_a_crashed_effect_is_reconciled",
    "test_through_pgbouncer_a_run_and_its_mirror",
    "test_through_pgbouncer_sql_answers",
    "test_through_pgbouncer_the_cli_drives_a_run",
]

NO_PREPARED = AgentLedgerConfig.read({"AGENTLEDGER_PREPARED_STATEMENTS": "0"}).prepared_statements


@pytest.fixture
async def pool(pgbouncer: str) -> AsyncIterator[AsyncConnectionPool]:
    """Every connection of these tests' workers and checks goes through PgBouncer."""
    pool = await open_pool(pgbouncer, max_size=20, prepared_statements=NO_PREPARED)
    await install_tool_schema(pool, agentledger.demo.registry.schema())
    yield pool
    await pool.close()


@pytest.fixture
def settings(settings: AgentLedgerConfig, pgbouncer: str) -> AgentLedgerConfig:
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


ADVISORY_LOCKS = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"


async def test_an_effect_lock_behind_pgbouncer_has_one_holder_and_ends_with_it(pool, database_url):
    """The lock that keeps two attempts of one external effect apart (ledger.locked), taken
    through PgBouncer in transaction mode: while one client holds it, every other client is
    refused, whichever server connection PgBouncer hands it (a session lock stays on the
    server connection, whose next client takes it again as its holder); once the holder is
    done, Postgres holds no lock of it (a session lock's unlock may run on another server
    connection and leave it held for ever)."""
    key = f"effect-{uuid.uuid4().hex}"
    async with await AsyncConnection.connect(database_url, autocommit=True) as direct:
        for _ in range(3):
            async with ledger.locked(pool, key) as mine:
                assert mine
                for _ in range(10):
                    async with ledger.locked(pool, key) as theirs:
                        assert not theirs
                cur = await direct.execute(ADVISORY_LOCKS)
                assert await cur.fetchone() == (1,)
            cur = await direct.execute(ADVISORY_LOCKS)
            assert await cur.fetchone() == (0,)
            async with ledger.locked(pool, key) as next_holder:
                assert next_holder


async def test_the_demo_runs_through_pgbouncer_with_prepared_statements_off(
    settings, pool, pgbouncer, tmp_path
):
    """`agentledger demo` as a user runs it against a managed Postgres behind PgBouncer in
    transaction mode: DATABASE_URL names the pooler, AGENTLEDGER_PREPARED_STATEMENTS=0. Its
    worker, its client and its migration all go through the pooler, and the run completes
    with its receipt in the database."""
    assert settings.database_url == pgbouncer
    env = {
        **cli_env(settings, tmp_path),
        "AGENTLEDGER_PREPARED_STATEMENTS": "0",
        "AGENTLEDGER_TASK_QUEUE": f"demo-{uuid.uuid4().hex[:8]}",
    }
    env.pop("AGENTLEDGER_TENANT", None)
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "starter.py", "demo", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout)
    assert outcome["status"] == "completed" and outcome["receipt"]["outcome"] == "completed"
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT status FROM runs WHERE run_id = %s", (outcome["run_id"],))
        assert await cur.fetchone() == ("completed",)


async def test_through_pgbouncer_a_read_held_behind_a_lock_ends_within_the_wait(
    settings, pool, tmp_path
):
    """A command's bound (`--wait`) holds through PgBouncer as it comes, which refuses a
    startup parameter (`options`) and so the statement timeout it once carried: Postgres
    cancels the read waiting on a lock at the bound, and the command says so."""
    environ = {"DATABASE_URL": settings.database_url, "AGENTLEDGER_PREPARED_STATEMENTS": "0"}
    async with pool.connection() as holder, holder.transaction():
        await holder.execute("LOCK TABLE runs IN ACCESS EXCLUSIVE MODE")
        began = time.monotonic()
        done = await asyncio.to_thread(run_cli, environ, "list", "--wait", "2", cwd=tmp_path)
        took = time.monotonic() - began
    assert done.returncode == 4, (done.stdout, done.stderr)
    assert "statement timeout" in done.stderr and "Traceback" not in done.stderr
    assert took < 2 + 1 + 5, f"{took:.1f} s (the bound, a second, the interpreter's start)"


def migrate(database_url: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTLEDGER_", "TEMPORAL_"))}
    return subprocess.run(
        [sys.executable, "-m", "agentledger", "migrate", "--wait", "30"],
        env={**env, "DATABASE_URL": database_url, "AGENTLEDGER_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=180,
    )


async def test_a_worker_without_ddl_rights_starts_on_a_migrated_schema_only(
    database_url, client, settings, tmp_path
):
    """The application role may read and write, not create: on a fresh database its worker
    refuses, naming `agentledger migrate`; after the owner runs `agentledger migrate` (the deploy
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
        SetupError,
        match=r"at version 0, this code needs .* may not change it .*`agentledger migrate`",
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
