"""A tool without a side effect gets its transaction only if it sends a statement
(agentledger.store.db.transaction_if_used): what it writes commits together, an error rolls it
back, and its connection goes back to the pool in autocommit whatever happened."""

from __future__ import annotations

import pytest
from psycopg.pq import TransactionStatus

from agentledger.store.db import transaction_if_used


async def test_a_body_that_sends_nothing_opens_no_transaction(pool):
    async with pool.connection() as conn:
        await conn.execute("CREATE TEMP TABLE IF NOT EXISTS untouched (x int)")
        before = conn.info.backend_pid
        async with transaction_if_used(conn):
            assert conn.info.transaction_status == TransactionStatus.IDLE
        assert conn.info.transaction_status == TransactionStatus.IDLE
        assert conn.autocommit and conn.info.backend_pid == before


async def test_what_the_body_writes_commits_as_one_and_an_error_rolls_it_back(pool):
    async with pool.connection() as conn:
        await conn.execute("CREATE TABLE IF NOT EXISTS lazy_tx (x int)")
        await conn.execute("TRUNCATE lazy_tx")
        async with transaction_if_used(conn):
            await conn.execute("INSERT INTO lazy_tx VALUES (1)")
            assert conn.info.transaction_status == TransactionStatus.INTRANS
            await conn.execute("INSERT INTO lazy_tx VALUES (2)")
        assert conn.autocommit
        with pytest.raises(RuntimeError):
            async with transaction_if_used(conn):
                await conn.execute("INSERT INTO lazy_tx VALUES (3)")
                raise RuntimeError("the tool failed")
        assert conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE
        cur = await conn.execute("SELECT array_agg(x ORDER BY x) FROM lazy_tx")
        assert (await cur.fetchone())[0] == [1, 2]
        await conn.execute("DROP TABLE lazy_tx")
