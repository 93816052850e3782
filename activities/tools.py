"""`tool.invoke`: run one tool call, exactly once where it has a side effect.

A side-effecting call claims its idempotency key in the ledger and performs its effect in
the same transaction; a retry after a crash finds the key and returns the recorded result.
"""

from __future__ import annotations

from typing import Any

from psycopg_pool import AsyncConnectionPool
from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.leases import hold_lease
from agentrun import faults, ledger
from agentrun.constants import ACTIVITY_TOOL_INVOKE
from agentrun.errors import UNKNOWN_TOOL
from agentrun.mirror_store import MirrorStore
from agentrun.models import JsonDict, ToolCallInput, ToolCallResult
from agentrun.tools import ToolContext, ToolRegistry
from agentrun.tools.registry import ToolError, UnknownToolError, compact_errors


class ToolActivities:
    def __init__(
        self, registry: ToolRegistry, pool: AsyncConnectionPool, store: MirrorStore, identity: str
    ) -> None:
        self.identity = identity
        self.registry = registry
        self.pool = pool
        self.store = store

    @activity.defn(name=ACTIVITY_TOOL_INVOKE)
    async def invoke(self, input: ToolCallInput) -> ToolCallResult:
        info = activity.info()
        try:
            tool = self.registry.get(input.tool)
        except UnknownToolError as err:
            raise ApplicationError(str(err), type=UNKNOWN_TOOL, non_retryable=True) from err
        try:
            args = tool.parse_arguments(input.arguments)
        except ValidationError as err:
            return ToolCallResult(
                ok=False,
                error=f"arguments failed validation: {compact_errors(err)}",
                attempt=info.attempt,
            )
        saved = await self.store.begin_attempt(
            run_id=input.run_id,
            step_id=input.step_id,
            seq=input.seq,
            type="tool_call",
            name=tool.name,
            attempt=info.attempt,
            worker=self.identity,
            lease_seconds=input.heartbeat_seconds,
            input=input.arguments,
            idempotency_key=input.idempotency_key if tool.side_effect else None,
        )
        checkpoint: JsonDict = {**input.checkpoint, **saved}
        patch: JsonDict = dict(saved)

        async def save_checkpoint(update: JsonDict) -> None:
            patch.update(update)
            checkpoint.update(update)
            await self.store.save_step_checkpoint(
                run_id=input.run_id, step_id=input.step_id, attempt=info.attempt, patch=update
            )

        duplicate = False
        output: Any = None
        try:
            async with (
                hold_lease(
                    self.store,
                    run_id=input.run_id,
                    step_id=input.step_id,
                    heartbeat_seconds=input.heartbeat_seconds,
                ),
                self.pool.connection() as conn,
                conn.transaction(),
            ):
                act = True
                if tool.side_effect:
                    act, output = await ledger.claim(
                        conn,
                        key=input.idempotency_key,
                        run_id=input.run_id,
                        step_id=input.step_id,
                        tool=tool.name,
                        attempt=info.attempt,
                    )
                    duplicate = not act
                if act:
                    context = ToolContext(
                        run_id=input.run_id,
                        step_id=input.step_id,
                        idempotency_key=input.idempotency_key,
                        checkpoint=checkpoint,
                        conn=conn,
                        save_checkpoint=save_checkpoint,
                        heartbeat=activity.heartbeat,
                    )
                    output = await tool.fn(args, context)
                    if tool.side_effect:
                        await ledger.complete(conn, key=input.idempotency_key, result=output)
        except ToolError as err:
            await self.store.end_attempt(
                run_id=input.run_id,
                step_id=input.step_id,
                attempt=info.attempt,
                status="failed",
                error=str(err),
            )
            return ToolCallResult(ok=False, error=str(err), attempt=info.attempt)
        except Exception as err:
            await self.store.end_attempt(
                run_id=input.run_id,
                step_id=input.step_id,
                attempt=info.attempt,
                status="failed",
                error=f"{type(err).__name__}: {err}",
            )
            raise
        faults.fire("tool.after_effect", tool.name)
        await self.store.end_attempt(
            run_id=input.run_id,
            step_id=input.step_id,
            attempt=info.attempt,
            status="succeeded",
            output=output,
        )
        return ToolCallResult(
            ok=True,
            output=output,
            duplicate_prevented=duplicate,
            checkpoint_patch=patch,
            attempt=info.attempt,
        )
