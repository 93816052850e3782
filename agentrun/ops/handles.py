"""What every client operation needs of a workflow, run or backlog alike: a handle to one
that is still running, and an update whose refusal becomes an OperationError saying why."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from agentrun.core.errors import OperationError


async def described(
    client: Client, workflow_id: str, *, missing: str
) -> tuple[WorkflowHandle[Any, Any], WorkflowExecutionStatus | None]:
    """The workflow's handle and status; an unknown id is an OperationError saying `missing`."""
    handle = client.get_workflow_handle(workflow_id)
    try:
        description = await handle.describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise OperationError(missing) from err
        raise
    return handle, description.status


async def running(
    client: Client, workflow_id: str, *, missing: str, ended: Callable[[str], str]
) -> WorkflowHandle[Any, Any]:
    """The handle of a workflow still running; one that ended is an OperationError saying
    `ended(its status)`."""
    handle, status = await described(client, workflow_id, missing=missing)
    if status != WorkflowExecutionStatus.RUNNING:
        raise OperationError(ended(status.name.lower() if status else "closed"))
    return handle


def refusal(err: WorkflowUpdateFailedError) -> str:
    """Why a validator (or the handler) refused an update."""
    return getattr(err.cause, "message", None) or str(err.cause)


async def update(handle: WorkflowHandle[Any, Any], update: Any, arg: Any) -> Any:
    """Run an update; a refusal, or a server that will not take it, says why."""
    try:
        return await handle.execute_update(update, arg)
    except WorkflowUpdateFailedError as err:
        raise OperationError(f"refused: {refusal(err)}") from err
    except RPCError as err:
        raise OperationError(f"refused: {err.message}") from err
