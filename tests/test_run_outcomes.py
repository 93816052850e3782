"""How a run ended reads the same through every reader: `RunClient.result`, Temporal's own
status (`describe()`), and agentrun's status."""

from __future__ import annotations

from temporalio.client import WorkflowExecutionStatus

from agentrun import RunClient
from agentrun.core.states import RunStatus
from agentrun.ops import operations as ops
from tests.support import make_spec, wait_pending


async def test_a_cancelled_run_reads_as_cancelled_through_run_client_result(
    client, settings, pool, worker
):
    async with worker():
        started = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
        await wait_pending(client, started.run_id, seconds=60)
        await ops.cancel(client, started.run_id)
        async with RunClient(client, settings) as runs:
            result = await runs.result(started.run_id)
    assert result.status == RunStatus.CANCELLED, result
    assert result.error == "cancelled on request"
    described = await client.get_workflow_handle(started.run_id).describe()
    assert described.status == WorkflowExecutionStatus.CANCELED
