"""Versioned deploys on the dev server: an open run stays on v1 while new runs take v2."""

from __future__ import annotations

import uuid

from temporalio.api.enums.v1 import EventType
from temporalio.service import RPCError

from agentledger import RunClient
from agentledger.temporal import deployments
from agentledger.workflows import AgentRunWorkflow
from tests import client_ops as ops
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
    deployment = f"agentledger-{uuid.uuid4().hex[:8]}"
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


async def test_a_deploy_moves_a_capped_tenant_and_a_backlog_to_v2_and_v1_drains(
    client, settings, pool, worker, tmp_path
):
    """With a capped tenant's runs queued and a backlog's tasks waiting, v2 becomes current:
    the tenant's queue and the backlog move to v2 at their continue-as-new, their new runs
    start on v2, the runs already on v1 finish there, and v1 drains to no open run."""
    from agentledger.core.admission_models import TenantLimits
    from agentledger.core.backlog_models import PolicyPatch, TaskItem, backlog_id, child_run_id
    from agentledger.workflows.admission import admission_id
    from tests import client_ops as backlog_ops
    from tests.support import eventually
    from tests.test_cli import run_cli

    deployment = f"agentledger-{uuid.uuid4().hex[:8]}"
    v1 = settings.model_copy(update={"deployment_name": deployment, "build_id": "v1"})
    v2 = settings.model_copy(update={"deployment_name": deployment, "build_id": "v2"})
    queue = settings.task_queue
    limits = TenantLimits(tenant="capped", max_in_flight=1, max_queued=10)

    async def start_capped() -> str:
        spec = make_spec(tenant="capped")
        return (await ops.start_run(client, spec, task_queue=queue, limits=limits)).run_id

    async def approve_when_pending(run_id: str) -> None:
        await wait_pending(client, run_id, seconds=60)
        await ops.approve(client, run_id, by="li", role="approver")
        await client.get_workflow_handle(run_id).result()

    async def exists(run_id: str) -> bool:
        try:
            await client.get_workflow_handle(run_id).describe()
        except RPCError:
            return False
        return True

    async def build_of(workflow_id: str) -> str | None:
        return (await deployments.run_version(client, workflow_id)).build_id

    tasks = [
        TaskItem(title=key, idempotency_key=key, spec=make_spec(idempotency_key=None))
        for key in ("first", "second")
    ]
    async with worker(settings=v1):
        await deployments.set_current_version(client, deployment, "v1")
        holding = await start_capped()
        await wait_pending(client, holding)
        waiting = await start_capped()  # behind the cap, on v1
        await backlog_ops.enqueue(
            client, "movers", tasks, task_queue=queue, policy=PolicyPatch(parallelism=1)
        )
        first_task = child_run_id("movers", "first", 1)
        await eventually(lambda: exists(first_task), what="the first task's run")
        await wait_pending(client, first_task)
        async with worker(settings=v2):
            await deployments.set_current_version(client, deployment, "v2")
            after = await start_capped()  # the queue moves to v2 first
            assert await build_of(after) == "v2"
            await approve_when_pending(holding)
            await approve_when_pending(waiting)
            await approve_when_pending(after)
            await approve_when_pending(first_task)  # the backlog moves once it ends
            second_task = child_run_id("movers", "second", 1)
            await eventually(lambda: exists(second_task), what="the second task's run")
            await approve_when_pending(second_task)

            for long_lived in (admission_id("capped"), backlog_id("movers")):
                assert await build_of(long_lived) == "v2", long_lived
            assert [await build_of(r) for r in (holding, waiting, first_task)] == ["v1"] * 3
            assert [await build_of(r) for r in (after, second_task)] == ["v2", "v2"]
            run_client = RunClient(
                client, settings.model_copy(update={"deployment_name": deployment})
            )

            async def v1_drained() -> bool:
                status = await run_client.deploys.status()
                return [(b.build_id, b.retirable) for b in status.builds] == [
                    ("v2", False),
                    ("v1", True),
                ]

            await eventually(v1_drained, seconds=30, what="v1 to have no open run")
            status = await run_client.deploys.status()
            assert status.current_build == "v2"
            [current] = [b for b in status.builds if b.current]
            # Still open on v2: the tenant's queue and the backlog, long-lived.
            assert set(current.open_runs) == {admission_id("capped"), backlog_id("movers")}
            shown = await run_cli(
                settings, tmp_path, "deploy", "status", "--deployment", deployment, "--json"
            )
            assert shown.code == 0, shown.err
            assert [b["retirable"] for b in shown.json()["builds"]] == [False, True]


async def test_a_deploy_never_turns_away_a_capped_tenant_with_room(client, settings, pool, worker):
    """After a deploy, a capped tenant with a run in flight on v1 and a free slot starts its
    next run at once, on v2: its queue moves to the current build although nothing fills its
    cap (the old queue turned every start away for as long as the v1 run lived)."""
    import time

    from agentledger.core.admission_models import TenantLimits
    from agentledger.workflows.admission import admission_id

    deployment = f"agentledger-{uuid.uuid4().hex[:8]}"
    v1 = settings.model_copy(update={"deployment_name": deployment, "build_id": "v1"})
    v2 = settings.model_copy(update={"deployment_name": deployment, "build_id": "v2"})
    tenant = f"roomy-{uuid.uuid4().hex[:6]}"
    limits = TenantLimits(tenant=tenant, max_in_flight=2, max_queued=10)

    async def start_capped() -> str:
        spec = make_spec(tenant=tenant)
        started = await ops.start_run(
            client, spec, task_queue=settings.task_queue, limits=limits, wait=20
        )
        return started.run_id

    async with worker(settings=v1):
        await deployments.set_current_version(client, deployment, "v1")
        holding = await start_capped()
        await wait_pending(client, holding)
        async with worker(settings=v2):
            await deployments.set_current_version(client, deployment, "v2")
            began = time.monotonic()
            after = await start_capped()
            assert time.monotonic() - began < 15, "the start waited on the deploy"
            await wait_pending(client, after)
            assert (await deployments.run_version(client, after)).build_id == "v2"
            assert (await deployments.run_version(client, holding)).build_id == "v1"
            assert (await deployments.run_version(client, admission_id(tenant))).build_id == "v2"
            for run_id in (holding, after):
                await ops.cancel(client, run_id)
