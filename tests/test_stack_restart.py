"""A restart of the embedded stack on the same folder resumes unfinished runs.

The stack here is the one `starter.py up` runs (its own Temporal dev server with a SQLite
history, an embedded Postgres, the offline model), stopped and started again on one home.
"""

from __future__ import annotations

import asyncio
import uuid

from temporalio.client import WorkflowExecutionStatus

from agentrun.core.models import RunResult
from agentrun.core.settings import Settings
from agentrun.dev.stack import EmbeddedStack, free_port, port_open
from agentrun.ops import operations as ops
from agentrun.store.db import open_pool
from agentrun.temporal.client import connect
from tests.conftest import running_worker
from tests.support import eventually, make_spec, rows, wait_pending
from workflows import AgentRunWorkflow


def settings_for(endpoints: dict[str, str], task_queue: str) -> Settings:
    return Settings.load({}).model_copy(
        update=dict(
            temporal_address=endpoints["temporal_address"],
            database_url=endpoints["database_url"],
            openai_base_url=endpoints["openai_base_url"],
            task_queue=task_queue,
        )
    )


async def test_restarted_stack_resumes_a_run_waiting_for_approval(tmp_path):
    home = tmp_path / "stack"
    temporal_port = free_port()  # the same port after the restart, as `starter.py up` does
    task_queue = f"restart-{uuid.uuid4().hex[:10]}"
    spec = make_spec()

    # First life: start the run and let it reach its approval gate.
    stack = EmbeddedStack(home=home, temporal_port=temporal_port, ui_port=free_port(), ui=False)
    try:
        settings = settings_for(await asyncio.to_thread(stack.start), task_queue)
        first_model_url = settings.openai_base_url
        client = await connect(settings)
        pool = await open_pool(settings.require_database(), max_size=5)
        try:
            async with running_worker(client, settings, pool):
                started = await ops.start_run(client, spec, task_queue=task_queue)
                pending = await wait_pending(client, started.run_id, seconds=60)
                # Let the mirror catch up with the gate before the worker goes away.
                await eventually(
                    lambda: rows(
                        pool,
                        "SELECT 1 FROM runs WHERE run_id = %s AND status = 'waiting_for_approval'",
                        started.run_id,
                    ),
                    what="the mirror to show the approval gate",
                )
        finally:
            await pool.close()
    finally:
        await asyncio.to_thread(stack.stop)
    assert not port_open(temporal_port), "the first Temporal dev server is down"
    run_id = started.run_id

    # Second life, on the same home: the run is still there, in Temporal and in Postgres.
    stack = EmbeddedStack(home=home, temporal_port=temporal_port, ui_port=free_port(), ui=False)
    try:
        settings = settings_for(await asyncio.to_thread(stack.start), task_queue)
        assert settings.openai_base_url != first_model_url, "a new model server, on a new port"
        client = await connect(settings)
        pool = await open_pool(settings.require_database(), max_size=5)
        try:
            description = await client.get_workflow_handle(run_id).describe()
            assert description.status == WorkflowExecutionStatus.RUNNING
            mirrored = await rows(pool, "SELECT status FROM runs WHERE run_id = %s", run_id)
            assert mirrored == [{"status": "waiting_for_approval"}]

            async with running_worker(client, settings, pool):
                again = await wait_pending(client, run_id, seconds=60)
                assert again == pending, "the same approval waits after the restart"
                await ops.approve(client, run_id, by="maria", role="approver")
                handle = client.get_workflow_handle_for(AgentRunWorkflow.run, run_id)
                result: RunResult = await asyncio.wait_for(handle.result(), 60)

            assert result.status.value == "completed"
            receipts = await rows(
                pool, "SELECT outcome, receipt FROM receipts WHERE run_id = %s", run_id
            )
            assert len(receipts) == 1 and receipts[0]["outcome"] == "completed"
            assert receipts[0]["receipt"]["approvals"][0]["by"] == "maria"
            sent = await rows(pool, "SELECT recipient FROM outbox WHERE run_id = %s", run_id)
            assert sent == [{"recipient": "ana@example.com"}], "the message went out once"
        finally:
            await pool.close()
    finally:
        await asyncio.to_thread(stack.stop)
    assert not port_open(temporal_port)
