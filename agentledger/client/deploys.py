"""`client.deploys`: worker builds on the caller's task queue: replay the open runs
against the code loaded here, make a build current, see what each build still serves.
Every one an operator's act (it spans every tenant's runs)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agentledger.client import deploy_check
from agentledger.client.scope import Scope, operators_only
from agentledger.core.builds import DeployStatus
from agentledger.core.errors import OperationRefused
from agentledger.core.replay_verdicts import DeployCheck, ReplayVerdict
from agentledger.core.version_branches import PatchInventory
from agentledger.temporal import deployments
from agentledger.workflows.engine import ENGINE_WORKFLOWS


def _with_engine(workflows: Sequence[type]) -> list[type]:
    """The engine's workflows and a deployment's own: what a worker here would run."""
    return [*ENGINE_WORKFLOWS, *workflows]


class Deploys:
    """The deployment's builds, for an operator."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    @operators_only("deploy makes a build current for every tenant's new runs")
    async def make_current(
        self,
        build_id: str,
        *,
        deployment: str | None = None,
        workflows: Sequence[type] = (),
        check: bool = True,
    ) -> str:
        """Make a worker build current: new runs start on it, open runs stay pinned. Unless
        `check` is off, only after `check` passes (the open runs replay against the code
        loaded here, with `workflows`, a deployment's own, beside the engine's). Returns the
        deployment's name."""
        if check:
            report = await self.check(workflows=workflows)
            if not report.passed:
                first = report.failed[0]
                raise OperationRefused(
                    f"not deployed: {len(report.failed)} open run(s) do not replay against "
                    f"this code, first {first.workflow_id}"
                    + (f" at event {first.event_id}" if first.event_id else "")
                    + f": {first.error}; `agentledger deploy check` lists them"
                )
        name = deployment or self.scope.config.deployment_name
        await deployments.set_current_version(await self.scope.temporal(), name, build_id)
        return name

    @operators_only("deploy check replays every tenant's open runs on the task queue")
    async def check(
        self,
        *,
        workflows: Sequence[type] = (),
        closed: int = 0,
        progress: Callable[[ReplayVerdict], Any] | None = None,
    ) -> DeployCheck:
        """Replay every open run on the caller's task queue (and the `closed` most recent
        closed ones) against the workflows loaded here: the engine's, and `workflows`."""
        return await deploy_check.check(
            await self.scope.temporal(),
            task_queue=self.scope.config.task_queue,
            workflows=_with_engine(workflows),
            closed=closed,
            progress=progress,
        )

    @operators_only("deploy status lists every tenant's open runs on each build")
    async def status(
        self, *, deployment: str | None = None, workflows: Sequence[type] = ()
    ) -> DeployStatus:
        """The deployment's builds, the open runs on the caller's task queue pinned to each,
        and which can be retired (not current, no open run)."""
        return await deployments.deployment_status(
            await self.scope.temporal(),
            deployment or self.scope.config.deployment_name,
            task_queue=self.scope.config.task_queue,
            workflow_types=deploy_check.workflow_names(_with_engine(workflows)),
        )

    @operators_only("deploy patches lists every tenant's open runs that need a version branch")
    async def patches(self, *, workflows: Sequence[type] = ()) -> PatchInventory:
        """The version branches left in the workflow code, each with the open runs on the
        caller's task queue that still need its old path (and whether it can go), and the
        open runs that need a retired branch."""
        return await deploy_check.patch_inventory(
            await self.scope.temporal(),
            task_queue=self.scope.config.task_queue,
            workflows=_with_engine(workflows),
        )
