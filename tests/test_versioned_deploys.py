"""Versioned deploys on the dev server: an open run stays on v1 while new runs take v2."""

from __future__ import annotations

import uuid

from temporalio.api.enums.v1 import EventType

from agentrun.ops import operations as ops
from agentrun.temporal import deployments
from agentrun.workflows import AgentRunWorkflow
from tests.support import make_spec, wait_pending


async def builds_that_ran(client, run_id: str) -> set[str]:
    """The build of every worker that completed a workflow task of the run."""
    history = await client.get_workflow_handle(run_id).fetch_history()
    return {
        event.workflow_task_completed_event_attributes.deployment_version.build_id
        for event in history.events
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    }


async def test_an_open_run_stays_on_v1_while_new_runs_take_v2(client, settings, pool, worker):
    deployment = f"agentrun-{uuid.uuid4().hex[:8]}"
    v1 = settings.model_copy(update={"deployment_name": deployment, "build_id": "v1"})
    v2 = settings.model_copy(update={"deployment_name": deployment, "build_id": "v2"})
    async with worker(settings=v1):
        await deployments.set_current_version(client, deployment, "v1")
        old = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
        await wait_pending(client, old.run_id)
        async with worker(settings=v2):
            await deployments.set_current_version(client, deployment, "v2")
            new = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
            await wait_pending(client, new.run_id)
            for run in (old, new):  # both go on past their approvals, each on its own build
                await ops.approve(client, run.run_id, by="li", role="approver")
                result = await client.get_workflow_handle_for(
                    AgentRunWorkflow.run, run.run_id
                ).result()
                assert result.status.value == "completed"

    assert await deployments.run_version(client, old.run_id) == deployments.RunVersion(
        run_id=old.run_id, deployment_name=deployment, build_id="v1", behavior="pinned"
    )
    assert (await deployments.run_version(client, new.run_id)).build_id == "v2"
    assert await builds_that_ran(client, old.run_id) == {"v1"}
    assert await builds_that_ran(client, new.run_id) == {"v2"}


async def test_unversioned_workers_leave_runs_unpinned(client, settings, worker):
    async with worker():
        started = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
        await wait_pending(client, started.run_id)
        version = await deployments.run_version(client, started.run_id)
        await ops.cancel(client, started.run_id)
    assert version.build_id is None and version.behavior is None
