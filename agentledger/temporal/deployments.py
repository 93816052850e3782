"""Versioned deploys: which build of the workers new runs go to, and which build a run is on.

Workers started with AGENTLEDGER_BUILD_ID declare that version of the `agentledger` Worker
Deployment, and runs are pinned to the version they start on. Making a version current
sends new runs to it; open runs finish where they started.
"""

from __future__ import annotations

import asyncio

from temporalio.api.enums.v1 import RoutingConfigUpdateState, VersionDrainageStatus
from temporalio.api.workflowservice.v1 import (
    DescribeWorkerDeploymentRequest,
    SetWorkerDeploymentCurrentVersionRequest,
)
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from agentledger.core.builds import BuildStatus, DeployStatus
from agentledger.core.errors import DeploymentError
from agentledger.core.results import RunVersion

__all__ = [
    "DeploymentError",
    "RunVersion",
    "deployment_status",
    "run_version",
    "set_current_version",
]


async def set_current_version(
    client: Client, deployment_name: str, build_id: str, *, wait_seconds: float = 30
) -> None:
    """Send new runs to `build_id`. A version exists once one of its workers has polled, so
    this retries for a bounded time while the workers of a fresh deploy come up."""
    deadline = asyncio.get_running_loop().time() + wait_seconds
    while True:
        try:
            await client.workflow_service.set_worker_deployment_current_version(
                SetWorkerDeploymentCurrentVersionRequest(
                    namespace=client.namespace,
                    deployment_name=deployment_name,
                    build_id=build_id,
                    identity=client.identity,
                )
            )
            await _routed(client, deployment_name, deadline)
            return
        except RPCError as err:
            waiting = err.status in (
                RPCStatusCode.NOT_FOUND,
                RPCStatusCode.FAILED_PRECONDITION,
                RPCStatusCode.ABORTED,
            )
            if not waiting or asyncio.get_running_loop().time() > deadline:
                raise DeploymentError(
                    f"cannot make {deployment_name}/{build_id} current ({err.message}): start "
                    f"a worker with AGENTLEDGER_BUILD_ID={build_id} first"
                ) from err
        await asyncio.sleep(0.3)


async def _routed(client: Client, deployment_name: str, deadline: float) -> None:
    """Until the server has sent the new current version to its task queues: a run started
    (or a long-lived workflow woken) right after a deploy then goes to the new build."""
    completed = RoutingConfigUpdateState.ROUTING_CONFIG_UPDATE_STATE_COMPLETED
    while asyncio.get_running_loop().time() < deadline:
        described = await client.workflow_service.describe_worker_deployment(
            DescribeWorkerDeploymentRequest(
                namespace=client.namespace, deployment_name=deployment_name
            )
        )
        state = described.worker_deployment_info.routing_config_update_state
        if state in (completed, RoutingConfigUpdateState.ROUTING_CONFIG_UPDATE_STATE_UNSPECIFIED):
            return
        await asyncio.sleep(0.1)


async def run_version(client: Client, run_id: str) -> RunVersion:
    """The build a run is pinned to (None for a run of unversioned workers)."""
    description = await client.get_workflow_handle(run_id).describe()
    info = description.raw_description.workflow_execution_info.versioning_info
    version = info.deployment_version
    return RunVersion(
        run_id=run_id,
        deployment_name=version.deployment_name or None,
        build_id=version.build_id or None,
        behavior="pinned" if info.behavior == 1 else "auto_upgrade" if info.behavior == 2 else None,
    )


async def deployment_status(
    client: Client, deployment_name: str, *, task_queue: str, workflow_types: list[str]
) -> DeployStatus:
    """The deployment's builds (the server's list), each with the open runs on `task_queue`
    pinned to it (listed from visibility, each described): which build is current and which
    can be retired."""
    try:
        described = await client.workflow_service.describe_worker_deployment(
            DescribeWorkerDeploymentRequest(
                namespace=client.namespace, deployment_name=deployment_name
            )
        )
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            raise
        info = None
    else:
        info = described.worker_deployment_info
    current = info.routing_config.current_deployment_version.build_id if info else ""
    builds: dict[str, BuildStatus] = {}
    for summary in info.version_summaries if info else []:
        build = summary.deployment_version.build_id
        drainage = summary.drainage_status
        builds[build] = BuildStatus(
            build_id=build,
            current=build == current,
            drainage=VersionDrainageStatus.Name(drainage)
            .removeprefix("VERSION_DRAINAGE_STATUS_")
            .lower()
            if drainage
            else None,
        )
    unversioned: list[str] = []
    kinds = ", ".join(f"'{name}'" for name in workflow_types)
    query = (
        f"WorkflowType IN ({kinds}) AND TaskQueue = '{task_queue}' "
        'AND ExecutionStatus = "Running"'
    )
    async for execution in client.list_workflows(query, page_size=200):
        # A listing's row does not carry the run's build: its description does.
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        described_run = await handle.describe()
        info_of_run = described_run.raw_description.workflow_execution_info
        version = info_of_run.versioning_info.deployment_version
        if not version.build_id:
            unversioned.append(execution.id)
            continue
        if version.deployment_name != deployment_name:
            continue
        pinned = builds.setdefault(
            version.build_id,
            BuildStatus(build_id=version.build_id, current=version.build_id == current),
        )
        pinned.open_runs.append(execution.id)
    return DeployStatus(
        deployment_name=deployment_name,
        current_build=current or None,
        builds=sorted(builds.values(), key=lambda b: (not b.current, b.build_id)),
        unversioned_runs=unversioned,
    )
