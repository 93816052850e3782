"""How a run ended reads the same through every reader: `client.runs.result`, Temporal's own
status (`describe()`), and agentledger's status."""

from __future__ import annotations

from temporalio.client import WorkflowExecutionStatus

from agentledger import RunClient
from agentledger.core.states import RunStatus
from agentledger.dev.offline_model import OfflineModelServer
from tests import client_ops as ops
from tests.support import make_spec, run_result, scripted, wait_pending
from tests.test_verification import BAD, CHECKS


async def test_a_cancelled_run_reads_as_cancelled_through_run_client_result(
    client, settings, pool, worker
):
    async with worker():
        started = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
        await wait_pending(client, started.run_id, seconds=60)
        await ops.cancel(client, started.run_id)
        async with RunClient(client, settings) as run_client:
            result = await run_client.runs.result(started.run_id)
    assert result.status == RunStatus.CANCELLED, result
    assert result.error == "cancelled on request"
    described = await client.get_workflow_handle(started.run_id).describe()
    assert described.status == WorkflowExecutionStatus.CANCELED


async def ended_everywhere(client, pool, run_id: str, status: RunStatus, temporal_status) -> None:
    """Temporal's ending, agentledger's status, the receipt and `client.runs.result` agree."""
    described = await client.get_workflow_handle(run_id).describe()
    assert described.status == temporal_status, (run_id, described.status)
    assert (await ops.status(client, run_id)).status == status
    assert (await ops.receipt(pool, run_id))["outcome"] == status.value
    assert (await run_result(client, run_id)).status == status


async def test_a_rejected_run_ends_canceled_in_temporal_and_cancelled_in_agentledger(
    client, settings, pool, worker
):
    async with worker():
        started = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
        await wait_pending(client, started.run_id, seconds=60)
        await ops.reject(client, started.run_id, by="li", role="approver", reason="wrong customer")
        async with RunClient(client, settings) as run_client:
            result = await run_client.runs.result(started.run_id)
        assert result.status == RunStatus.CANCELLED
        assert "wrong customer" in (result.error or "")
        await ended_everywhere(
            client, pool, started.run_id, RunStatus.CANCELLED, WorkflowExecutionStatus.CANCELED
        )


async def test_a_run_that_fails_verification_ends_failed_in_temporal_with_its_result(
    client, settings, pool, worker
):
    spec = make_spec("count", allowed_tools=[], verify={**CHECKS, "on_failure": "fail"})
    with OfflineModelServer(scripted(BAD)) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            async with RunClient(client, settings) as run_client:
                result = await run_client.runs.result(started.run_id)
            assert result.status == RunStatus.FAILED and result.run_id == started.run_id
            assert "verification failed" in (result.error or "")
            assert result.tokens_in > 0, "the result carries the run's usage"
            await ended_everywhere(
                client, pool, started.run_id, RunStatus.FAILED, WorkflowExecutionStatus.FAILED
            )


async def test_a_completed_and_a_user_cancelled_run_end_so_in_temporal(
    client, settings, pool, worker
):
    async with worker():
        done = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
        await wait_pending(client, done.run_id, seconds=60)
        await ops.approve(client, done.run_id, by="li", role="approver")
        assert (await run_result(client, done.run_id)).status == RunStatus.COMPLETED
        await ended_everywhere(
            client, pool, done.run_id, RunStatus.COMPLETED, WorkflowExecutionStatus.COMPLETED
        )
        cancelled = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
        await wait_pending(client, cancelled.run_id, seconds=60)
        await ops.cancel(client, cancelled.run_id)
        assert (await run_result(client, cancelled.run_id)).status == RunStatus.CANCELLED
        await ended_everywhere(
            client, pool, cancelled.run_id, RunStatus.CANCELLED, WorkflowExecutionStatus.CANCELED
        )
