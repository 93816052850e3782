"""Pause at a step boundary, resume from there, cancel with a receipt, start once per key."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import WorkflowFailureError
from temporalio.exceptions import CancelledError

from agentledger.core.errors import OperationError
from agentledger.dev.offline_model import OfflineModelServer
from agentledger.workflows import AgentRunWorkflow
from tests import client_ops as ops
from tests.support import (
    eventually,
    make_spec,
    rows,
    run_result,
    scripted,
    wait_mirrored_status,
    wait_pending,
    wait_status,
)

SLOW_INDEX = [("index_documents", {"documents": ["a", "b", "c", "d"], "seconds_per_document": 0.4})]
DONE = "## Summary\nIndexed the documents."


async def test_pause_stops_at_the_next_boundary_and_resume_continues(
    client, settings, pool, worker
):
    with OfflineModelServer(scripted(SLOW_INDEX, DONE)) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(
                client, make_spec("index"), task_queue=settings.task_queue
            )
            await wait_status(client, started.run_id, "waiting_for_tool")
            reply = await ops.control(client, started.run_id, "pause")
            assert reply.paused
            # The tool step in flight finishes; the run then stops before the next model call.
            state = await wait_status(client, started.run_id, "paused")
            assert [s.type for s in state.steps] == ["model_call", "tool_call", "checkpoint"]
            assert state.steps[1].status == "completed"
            await asyncio.sleep(1.0)
            assert len((await ops.status(client, started.run_id)).steps) == 3, "nothing ran"
            assert len(model.requests) == 1
            await wait_mirrored_status(pool, started.run_id, "paused")

            await ops.control(client, started.run_id, "resume")
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
            result = await handle.result()
    assert result.status.value == "completed"
    events = await rows(
        pool, "SELECT type FROM events WHERE run_id = %s ORDER BY seq", started.run_id
    )
    kinds = [e["type"] for e in events]
    assert kinds.index("run.paused") < kinds.index("run.resumed")


async def test_resume_refuses_a_run_that_is_not_paused(client, settings, worker):
    async with worker():
        started = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
        await wait_pending(client, started.run_id)
        with pytest.raises(OperationError, match="is not paused"):
            await ops.control(client, started.run_id, "resume")
        await ops.cancel(client, started.run_id)


async def test_cancel_ends_the_run_cancelled_with_its_receipt(client, settings, pool, worker):
    async with worker():
        started = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
        pending = await wait_pending(client, started.run_id)
        await ops.cancel(client, started.run_id)
        handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
        with pytest.raises(WorkflowFailureError) as failure:
            await handle.result()
        assert isinstance(failure.value.cause, CancelledError)

    receipt = await ops.receipt(pool, started.run_id)
    assert receipt["outcome"] == "cancelled"
    assert any(pending.approval_id in u for u in receipt["unresolved"])
    steps = await rows(
        pool,
        "SELECT status, final FROM steps WHERE run_id = %s AND step_id = %s",
        started.run_id,
        pending.step_id,
    )
    assert steps == [{"status": "abandoned", "final": True}]
    assert await rows(pool, "SELECT 1 FROM outbox WHERE run_id = %s", started.run_id) == []
    with pytest.raises(OperationError, match="already ended"):
        await ops.cancel(client, started.run_id)


async def test_same_idempotency_key_is_the_same_run(client, settings, worker):
    spec = make_spec("Summarize the order policy.", allowed_tools=["search_notes"])
    first = await ops.start_run(client, spec, task_queue=settings.task_queue)
    again = await ops.start_run(client, spec, task_queue=settings.task_queue)
    assert (first.existing, again.existing) == (False, True)
    assert again.run_id == first.run_id
    async with worker():
        await client.get_workflow_handle_for(AgentRunWorkflow.run, first.run_id).result()
    after = await ops.start_run(client, spec, task_queue=settings.task_queue)
    assert after.existing and after.run_id == first.run_id, "an ended run is not started again"
    other = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
    assert not other.existing and other.run_id != first.run_id
    await client.get_workflow_handle(other.run_id).terminate("test cleanup")


async def test_step_limit_fails_the_run_with_a_reason(client, settings, pool, worker):
    loop_forever = scripted([("search_notes", {"query": "again"})])
    with OfflineModelServer(loop_forever) as model:
        async with worker(base_url=model.base_url):
            spec = make_spec("loop", max_steps=3)
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            result = await run_result(client, started.run_id)
    assert result.status.value == "failed"
    assert "step limit" in (result.error or "")
    assert (await ops.receipt(pool, started.run_id))["outcome"] == "failed"
    await eventually(
        lambda: rows(
            pool, "SELECT 1 FROM runs WHERE run_id = %s AND status = 'failed'", started.run_id
        ),
        what="mirror shows failed",
    )
