"""`client.backlogs`: an agent's queue of tasks, each a run in turn, for the caller's
tenant (docs/backlogs.md)."""

from __future__ import annotations

from pathlib import Path

from agentledger.core.backlog_models import (
    BacklogControlResult,
    EnqueueResult,
    PolicyPatch,
    RetryResult,
    TaskItem,
)
from agentledger.core.listings import BacklogListing, DeadTask
from agentledger.ops import backlog_ops, door
from agentledger.services.client_session import ClientSession
from agentledger.services.runs import operator_profiles


class Backlogs:
    """The caller's tasks in each agent's backlog: under a tenant, only its own."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session

    @staticmethod
    def load_tasks(path: str | Path) -> list[TaskItem]:
        """The tasks of a JSON or YAML backlog file, checked, in order."""
        return backlog_ops.load_tasks(path)

    async def enqueue(
        self,
        agent: str,
        tasks: list[TaskItem],
        *,
        policy: PolicyPatch | None = None,
        wait: float | None = None,
    ) -> EnqueueResult:
        """Add tasks at the end of the agent's backlog, in order (creating it). Each task
        runs for the caller's tenant (a task naming another is refused) under its tenant's
        policy (its approvers and weight), read through the door; under a tenant, `policy`
        is its own tasks' alone."""
        session = self.session
        wait = session.bound(wait)
        who = session.who(session.tenant or door.DEFAULT_TENANT)
        queued = await door.backlog_tasks(
            await session.mirror(),
            tasks,
            acting_tenant=session.tenant,
            requester=who.identity,
            roles=who.roles,
            profiles=operator_profiles(session.settings),
        )
        return await backlog_ops.enqueue(
            await session.temporal(wait),
            agent,
            queued,
            task_queue=session.settings.task_queue,
            policy=policy,
            wait=wait,
            tenant=session.tenant,
        )

    async def stop(self, agent: str, *, wait: float | None = None) -> BacklogControlResult:
        """Stop the backlog: under a tenant, that tenant's tasks alone (others' go on)."""
        return await self.session.act(backlog_ops.stop, agent, wait=wait)

    async def resume(self, agent: str, *, wait: float | None = None) -> BacklogControlResult:
        """Resume the backlog: under a tenant, that tenant's stopped tasks alone."""
        return await self.session.act(backlog_ops.resume, agent, wait=wait)

    async def retry(self, agent: str, task_key: str, *, wait: float | None = None) -> RetryResult:
        """Put a failed task back; another tenant's task reads as a missing one."""
        return await self.session.act(backlog_ops.retry, agent, task_key, wait=wait)

    async def tasks(self, agent: str) -> BacklogListing:
        """The backlog as the mirror last saw it, with every task (the caller's tenant's
        alone, under one) in order."""
        listing = await backlog_ops.list_tasks(
            await self.session.database(), agent, tenant=self.session.tenant
        )
        return BacklogListing.model_validate(listing)

    async def dead(self, agent: str) -> list[DeadTask]:
        """The tasks that used up their attempts (the caller's tenant's, under one)."""
        dead = await backlog_ops.dead_letters(
            await self.session.database(), agent, tenant=self.session.tenant
        )
        return [DeadTask.model_validate(task) for task in dead]
