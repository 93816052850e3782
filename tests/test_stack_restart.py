"""A restart of the embedded stack on the same folder resumes unfinished runs.

The stack here is the one `starter.py up` runs (its own Temporal dev server with a SQLite
history, an embedded Postgres, the offline model), stopped and started again on one home.
"""

from __future__ import annotations

import asyncio
import uuid

from temporalio.api.workflowservice.v1 import GetSystemInfoRequest
from temporalio.client import WorkflowExecutionStatus

from agentledger.core.config import AgentLedgerConfig
from agentledger.core.results import RunResult
from agentledger.dev.stack import EmbeddedStack, free_port, frontend_serving, port_open
from agentledger.store.db import open_pool
from agentledger.temporal.client import connect
from agentledger.workflows import AgentRunWorkflow
from tests import client_ops as ops
from tests.conftest import running_worker
from tests.support import eventually, make_spec, rows, wait_pending


def settings_for(endpoints: dict[str, str], task_queue: str) -> AgentLedgerConfig:
    return AgentLedgerConfig.load({}).model_copy(
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


async def test_a_started_stack_serves_clients_at_once(tmp_path):
    """The dev server opens its port before its frontend serves ("Frontend is not healthy
    yet"): the stack counts as started only once it passes the health check, so the worker
    `up` starts next, and any client, connects at the first try."""
    port = free_port()
    assert not frontend_serving(port)  # nothing listens there yet
    stack = EmbeddedStack(
        home=tmp_path / "stack", temporal_port=port, ui_port=free_port(), ui=False
    )
    try:
        endpoints = await asyncio.to_thread(stack.start)
        assert frontend_serving(port)
        client = await connect(settings_for(endpoints, "health"))
        info = await client.workflow_service.get_system_info(GetSystemInfoRequest())
        assert info.server_version
    finally:
        await asyncio.to_thread(stack.stop)
