"""A run's last rows and its receipt are one transaction; refused data falls back row by row."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from temporalio.testing import ActivityEnvironment

from agentledger.activities.mirror import MirrorActivities
from agentledger.core.results import Receipt
from agentledger.core.states import RunStatus
from agentledger.core.wire import FinishInput, ReceiptChanges
from agentledger.store.db import pipelined_transaction
from agentledger.store.mirror_store import MirrorStore
from agentledger.store.model_journal import ModelJournal
from tests.support import mirror_batch, rows


def receipt(run_id: str) -> Receipt:
    now = datetime.now(UTC)
    return Receipt(
        run_id=run_id,
        task="group commit",
        tenant="t",
        user="u",
        outcome=RunStatus.COMPLETED,
        answer="## Summary\nDone.",
        error=None,
        steps=[],
        side_effects=[],
        approvals=[],
        retries=[],
        duplicates_prevented=0,
        tokens_in=0,
        tokens_out=0,
        cost_usd=0.0,
        verification=None,
        unresolved=[],
        started_at=now,
        finished_at=now,
    )


def new_run() -> str:
    return f"run-finish-{uuid.uuid4().hex[:8]}"


async def written(pool, run_id: str) -> tuple[int, int, int]:
    """(run rows, final steps, receipts) the mirror holds for the run."""
    [counts] = await rows(
        pool,
        """SELECT (SELECT count(*) FROM runs WHERE run_id = %s) AS runs,
                  (SELECT count(*) FROM steps WHERE run_id = %s AND final) AS steps,
                  (SELECT count(*) FROM receipts WHERE run_id = %s) AS receipts""",
        run_id,
        run_id,
        run_id,
    )
    return counts["runs"], counts["steps"], counts["receipts"]


async def test_finish_writes_the_last_rows_and_the_receipt_together(pool):
    run_id = new_run()
    activities = MirrorActivities(MirrorStore(pool), ModelJournal(pool))
    sent = receipt(run_id)
    echo = await ActivityEnvironment().run(
        activities.finish,
        FinishInput(batch=mirror_batch(run_id, fence=5, status="completed"), receipt=sent),
    )
    assert await written(pool, run_id) == (1, 1, 1)
    # History gets what the activity changed, not the receipt again; applied to
    # what the workflow sent, it is the receipt stored.
    assert isinstance(echo, ReceiptChanges) and len(echo.model_dump_json()) < 100
    [stored] = await rows(pool, "SELECT receipt FROM receipts WHERE run_id = %s", run_id)
    done = echo.applied_to(sent)
    assert done.run_id == run_id and done.retries == []
    assert done.model_dump(mode="json") == Receipt.model_validate(stored["receipt"]).model_dump(
        mode="json"
    )


async def test_a_finish_that_fails_midway_writes_nothing(pool):
    """The rows were sent, then reading for the receipt failed: no row and no receipt stay
    (the transaction rolled back), and the connection goes back to the pool usable."""
    run_id = new_run()

    async def broken(conn: object) -> Receipt:
        raise RuntimeError("the receipt could not be completed")

    with pytest.raises(RuntimeError):
        await MirrorStore(pool).finish(mirror_batch(run_id, fence=5), broken)
    assert await written(pool, run_id) == (0, 0, 0)
    await MirrorStore(pool).sync(mirror_batch(run_id, fence=6))
    assert await written(pool, run_id) == (1, 1, 0)


async def test_refused_data_in_a_finish_is_recorded_and_the_rest_lands(pool):
    run_id = new_run()
    activities = MirrorActivities(MirrorStore(pool), ModelJournal(pool))
    refused = mirror_batch(run_id, fence=5, cost_usd=1e12)  # beyond numeric(14, 6)
    await ActivityEnvironment().run(
        activities.finish, FinishInput(batch=refused, receipt=receipt(run_id))
    )
    assert await written(pool, run_id) == (0, 1, 1)
    failures = await rows(pool, "SELECT target FROM mirror_failures WHERE run_id = %s", run_id)
    assert failures == [{"target": "runs"}]


async def test_a_pipelined_transaction_rolls_back_what_it_sent(pool):
    """Statements already on the wire when the body fails are not committed."""
    run_id = new_run()
    async with pool.connection() as conn:
        with pytest.raises(ZeroDivisionError):
            async with pipelined_transaction(conn):
                await conn.execute(
                    "INSERT INTO mirror_failures (run_id, target, fence, error) "
                    "VALUES (%s, 'probe', 0, 'probe')",
                    (run_id,),
                )
                await conn.execute("SELECT 1")
                1 / 0  # noqa: B018
        assert conn.info.transaction_status.name == "IDLE"
    assert await rows(pool, "SELECT 1 FROM mirror_failures WHERE run_id = %s", run_id) == []
