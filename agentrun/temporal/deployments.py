"""Versioned deploys: which build of the workers new runs go to, and which build a run is on.

Workers started with AGENTRUN_BUILD_ID declare that version of the `agentrun` Worker
Deployment, and runs are pinned to the version they start on. Making a version current
sends new runs to it; open runs finish where they started.
"""

from __future__ import annotations

import asyncio

from temporalio.api.workflowservice.v1 import SetWorkerDeploymentCurrentVersionRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from agentrun.core.errors import DeploymentError
from agentrun.core.results import RunVersion

__all__ = ["DeploymentError", "RunVersion", "run_version", "set_current_version"]


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
                    f"a worker with AGENTRUN_BUILD_ID={build_id} first"
                ) from err
        await asyncio.sleep(0.3)


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
