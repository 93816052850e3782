"""`agentrun.RunClient`: start runs, decide approvals and read receipts from Python.

The same operations the CLI runs (agentrun/ops/operations.py), with the connection made once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Self

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from agentrun.core.models import (
    DecisionResult,
    JsonDict,
    RunResult,
    RunSpec,
    RunState,
    WatchItem,
)
from agentrun.core.settings import Settings
from agentrun.ops import fork_ops, watch
from agentrun.ops import operations as ops
from agentrun.ops.approver_keys import ApproverKey
from agentrun.profiles import Agent
from agentrun.store.db import open_pool
from agentrun.temporal.client import connect


class RunClient:
    """A connection to Temporal (and, for receipts, to Postgres) for one program."""

    def __init__(self, client: Client, settings: Settings) -> None:
        self.client = client
        self.settings = settings
        self._pool: AsyncConnectionPool | None = None

    @classmethod
    async def connect(cls, settings: Settings | None = None) -> Self:
        """Connect to the stack the settings (by default the environment) name."""
        settings = settings or Settings.load()
        return cls(await connect(settings), settings)

    async def start(
        self, task: str | None = None, *, agent: Agent | None = None, **fields: Any
    ) -> str:
        """Start a run and return its id: `agent`'s profile expanded, `fields` (any run-spec
        field, e.g. `idempotency_key`) over it. Starting again with the same idempotency key
        returns the same run."""
        if task is not None:
            fields["task"] = task
        spec = agent.spec(**fields) if agent is not None else RunSpec.model_validate(fields)
        pool = await self._database() if self.settings.database_url else None
        if agent is not None and spec.allowed_tools:
            await ops.require_tools(
                pool or await self._database(), self.settings.task_queue, spec.allowed_tools
            )
        started = await ops.start_run(
            self.client,
            spec,
            task_queue=self.settings.task_queue,
            indexed=self.settings.search_attributes,
            mirror=pool,
            tenant=self.settings.tenant,
        )
        return started.run_id

    async def approve(
        self,
        run_id: str,
        *,
        by: str,
        role: str | None = None,
        edit: JsonDict | None = None,
        signer: ApproverKey | None = None,
    ) -> DecisionResult:
        """With `signer` (`approver_keys.load`), the decision is signed with that key, as
        runs with keyed approvers require; AGENTRUN_TENANT confines it to that tenant."""
        return await ops.approve(
            self.client,
            run_id,
            by=by,
            role=_deciding_role(role, signer),
            edit=edit,
            tenant=self.settings.tenant,
            signer=signer,
        )

    async def reject(
        self,
        run_id: str,
        *,
        by: str,
        reason: str,
        role: str | None = None,
        signer: ApproverKey | None = None,
    ) -> DecisionResult:
        return await ops.reject(
            self.client,
            run_id,
            by=by,
            role=_deciding_role(role, signer),
            reason=reason,
            tenant=self.settings.tenant,
            signer=signer,
        )

    async def status(self, run_id: str) -> RunState:
        return await ops.status(self.client, run_id, tenant=self.settings.tenant)

    async def result(self, run_id: str) -> RunResult:
        """Wait for the run to end."""
        return await ops.result(self.client, run_id)

    async def receipt(self, run_id: str) -> JsonDict:
        return await ops.receipt(await self._database(), run_id, tenant=self.settings.tenant)

    def watch(self, run_id: str, *, from_offset: int = 0) -> AsyncIterator[WatchItem]:
        """The run as it happens (events, model text), ending with its receipt when a
        database is configured; an ended run's story from the mirror."""
        return self._watch(run_id, from_offset)

    async def _watch(self, run_id: str, from_offset: int) -> AsyncIterator[WatchItem]:
        pool = await self._database() if self.settings.database_url else None
        async for item in watch.watch(self.client, run_id, pool=pool, from_offset=from_offset):
            yield item

    async def fork(
        self,
        run_id: str,
        *,
        from_step: int,
        edit_output: Any = None,
        key: str | None = None,
    ) -> str:
        """A new run from `run_id`'s step `from_step` (steps before it as recorded; an edited
        output for a tool step); returns its id."""
        started = await fork_ops.fork_run(
            self.client,
            await self._database(),
            run_id,
            from_step=from_step,
            edit_output=edit_output,
            key=key,
            task_queue=self.settings.task_queue,
            indexed=self.settings.search_attributes,
        )
        return started.run_id

    async def _database(self) -> AsyncConnectionPool:
        """The Postgres pool, opened on first use and kept until `close()`."""
        if self._pool is None:
            database = self.settings.require_database()
            self._pool = await open_pool(
                database,
                max_size=2,
                connect_seconds=5,
                prepared_statements=self.settings.prepared_statements,
            )
        return self._pool

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None


def _deciding_role(role: str | None, signer: ApproverKey | None) -> str:
    """A decision names the role it is made in: a signer's key carries it; no default is
    a free pass."""
    if signer is not None:
        return signer.signer.role
    if not role:
        raise ValueError(
            "name the role this decision is made in: role='approver' (the role the approval "
            "asks for, shown by status), or pass signer= (its key carries the role)"
        )
    return role
