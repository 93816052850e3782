"""A mirror write is one statement: the run's batch (its run row, steps and events) and the
step attempt's claim, with no BEGIN or COMMIT; a batch that names a row twice is split so
that each version lands in order, as separate writes would land it."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from agentledger.core.wire import RunEvent, StepRecord
from agentledger.store.mirror_store import MirrorStore, _Write
from tests.support import mirror_batch, rows, step_claim


def new_run() -> str:
    return f"run-statement-{uuid.uuid4().hex[:8]}"


def approval(run_id: str, status: str, *, final: bool) -> StepRecord:
    return StepRecord(
        step_id="0002-approval",
        seq=2,
        type="approval",
        name="send_message",
        status=status,
        input={"tool": "send_message"},
        output=None if not final else {"decision": status},
        final=final,
    )


async def test_a_claim_and_its_runs_batch_are_one_statement(pool):
    store = MirrorStore(pool)
    run = new_run()
    claim = store._claim(**step_claim(run, "0002-tool_call", 1))
    write = _Write(batch=mirror_batch(run, fence=3, step_seq=1), claim=claim)
    [statement] = store._statements(write)
    assert statement.claims and "BEGIN" not in statement.sql
    assert (
        await store.begin_attempt(**step_claim(run, "0002-tool_call", 1), batch=write.batch) == {}
    )
    landed = await rows(pool, "SELECT step_id, status, final FROM steps WHERE run_id = %s", run)
    assert sorted(landed, key=lambda r: r["step_id"]) == [
        {"step_id": "0001-tool_call", "status": "completed", "final": True},
        {"step_id": "0002-tool_call", "status": "running", "final": False},
    ]
    assert await rows(pool, "SELECT seq, type FROM events WHERE run_id = %s", run) == [
        {"seq": 1, "type": "step.completed"}
    ]


async def test_a_batch_that_names_a_step_and_an_event_twice_lands_them_in_order(pool):
    # A batch put back after a step activity that did not complete holds the approval's
    # "waiting" row, and the next write adds its decided row: the later version wins.
    store = MirrorStore(pool)
    run = new_run()
    now = datetime.now(UTC)
    batch = mirror_batch(run, fence=7).model_copy(
        update={
            "steps": [approval(run, "waiting", final=False), approval(run, "approved", final=True)],
            "events": [
                RunEvent(seq=5, type="approval.requested", at=now),
                RunEvent(seq=5, type="approval.requested", at=now),
                RunEvent(seq=6, type="approval.approved", at=now),
            ],
        }
    )
    claim = store._claim(**step_claim(run, "0003-tool_call", 1))
    statements = store._statements(_Write(batch=batch, claim=claim))
    assert [sorted(s.steps) for s in statements] == [
        ["0002-approval"],
        ["0002-approval", "0003-tool_call"],
    ]
    assert [s.claims for s in statements] == [False, True]
    await store.begin_attempt(**step_claim(run, "0003-tool_call", 1), batch=batch)
    [step] = await rows(
        pool, "SELECT status, final, output FROM steps WHERE run_id = %s AND seq = 2", run
    )
    assert step == {"status": "approved", "final": True, "output": {"decision": "approved"}}
    events = await rows(pool, "SELECT seq, type FROM events WHERE run_id = %s ORDER BY seq", run)
    assert events == [
        {"seq": 5, "type": "approval.requested"},
        {"seq": 6, "type": "approval.approved"},
    ]


async def test_a_claim_on_a_step_its_batch_writes_is_a_statement_of_its_own(pool):
    # The batch makes the step final; the claim, sent after it, is fenced off by that row.
    store = MirrorStore(pool)
    run = new_run()
    batch = mirror_batch(run, fence=4, step_seq=2)  # finalizes 0002-tool_call
    claim = store._claim(**step_claim(run, "0002-tool_call", 2))
    statements = store._statements(_Write(batch=batch, claim=claim))
    assert [s.claims for s in statements] == [False, True]
    await store.begin_attempt(**step_claim(run, "0002-tool_call", 2), batch=batch)
    [step] = await rows(pool, "SELECT status, attempt, final FROM steps WHERE run_id = %s", run)
    assert step == {"status": "completed", "attempt": 1, "final": True}


async def test_a_nul_in_any_value_of_a_batch_is_spelled_out(pool):
    store = MirrorStore(pool)
    run = new_run()
    batch = mirror_batch(run, fence=2)
    batch = batch.model_copy(
        update={
            "run": batch.run.model_copy(update={"task": "a\x00b"}),
            "steps": [batch.steps[0].model_copy(update={"output": {"k\x00": "v\x00"}})],
        }
    )
    await store.sync(batch)
    assert await rows(pool, "SELECT task FROM runs WHERE run_id = %s", run) == [
        {"task": "a\\u0000b"}
    ]
    assert await rows(pool, "SELECT output FROM steps WHERE run_id = %s", run) == [
        {"output": {"k\\u0000": "v\\u0000"}}
    ]
