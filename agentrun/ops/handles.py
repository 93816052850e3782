"""What every client operation needs of a workflow, run or backlog alike, each within the
command's bound: its description (no worker needed), a query, an update whose refusal
becomes an OperationError saying why, and what to say of an update no worker took in time."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio.client import (
    WorkflowExecutionDescription,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError, RPCStatusCode

from agentrun.core.errors import NotAnswered, OperationRefused, RunNotFound
from agentrun.temporal.worker_presence import Deadline, NoAnswer, start_a_worker, within


async def describe_within(
    handle: WorkflowHandle[Any, Any], deadline: Deadline
) -> WorkflowExecutionDescription:
    """What the server knows of a workflow (no worker needed), or OperationError in time."""
    try:
        return await within(
            deadline.left(), handle.describe(rpc_timeout=timedelta(seconds=deadline.left()))
        )
    except NoAnswer as err:
        raise NotAnswered(
            f"Temporal did not answer within {deadline.seconds:g}s; is the server up?"
        ) from err


async def ask_within(
    handle: WorkflowHandle[Any, Any], query: Any, deadline: Deadline, fraction: float = 0.5
) -> Any:
    """A query, or NoAnswer when no worker answers within its share of the bound."""
    seconds = deadline.share(fraction)
    try:
        return await within(seconds, handle.query(query, rpc_timeout=timedelta(seconds=seconds)))
    except RPCError as err:
        # A query fails only at the server (the workflow's own failures are another error):
        # out of time, or, as the server also says, "no poller seen ... worker may be down".
        if err.status == RPCStatusCode.NOT_FOUND:
            raise RunNotFound(f"no run {handle.id!r}: `agentrun list` shows the runs") from err
        raise NoAnswer from err


async def update_within(
    handle: WorkflowHandle[Any, Any], task_queue: str, update: Any, arg: Any, deadline: Deadline
) -> Any:
    """An update, or OperationError: refused (its reason), or held (no worker in time)."""
    seconds = deadline.left()
    try:
        return await within(
            seconds, handle.execute_update(update, arg, rpc_timeout=timedelta(seconds=seconds))
        )
    except WorkflowUpdateFailedError as err:
        raise OperationRefused(f"refused: {refusal(err)}") from err
    except (NoAnswer, WorkflowUpdateRPCTimeoutOrCancelledError) as err:
        raise NotAnswered(held(handle.id, task_queue, deadline)) from err
    except RPCError as err:
        raise OperationRefused(f"refused: {err.message}") from err


def refusal(err: WorkflowUpdateFailedError) -> str:
    return getattr(err.cause, "message", None) or str(err.cause)


def held(workflow_id: str, task_queue: str, deadline: Deadline) -> str:
    """An update sent when a worker seemed alive that none answered in time."""
    return (
        f"sent, but no worker answered within {deadline.seconds:g}s (one was polling a moment "
        "before): the server holds the request and applies it, with the same checks, when a "
        f"worker takes {workflow_id}; `status` shows whether it did; "
        f"{start_a_worker(task_queue)}"
    )
