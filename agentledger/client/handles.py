"""What every client operation needs of a workflow, run or backlog alike, each within the
command's bound: a query, an update whose refusal becomes an OperationError saying why, a
signal the server confirmed, and what to say of a write no worker took in time.

A write is reported as held only with evidence that the server holds it: an update the
run accepted (it is in the history), or a signal the server confirmed (likewise). An
update the server would not admit (every update slot of the run taken, or its total
spent) is told apart at once (`admit_update`), so a command can send its signal instead
of waiting out its bound and guessing.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import timedelta
from typing import Any

from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel
from temporalio.api.common.v1 import Payloads, WorkflowExecution
from temporalio.api.enums.v1 import UpdateWorkflowExecutionLifecycleStage
from temporalio.api.update.v1 import Input, Meta, Request, WaitPolicy
from temporalio.api.workflowservice.v1 import (
    ResetStickyTaskQueueRequest,
    UpdateWorkflowExecutionRequest,
)
from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateHandle,
)
from temporalio.service import RPCError, RPCStatusCode

from agentledger.client.scope import RunRef, no_run
from agentledger.core import search_attributes
from agentledger.core.errors import NotAnswered, OperationRefused
from agentledger.core.messages import Message
from agentledger.core.states import RunStatus
from agentledger.store import mirror_views
from agentledger.temporal.worker_presence import (
    Deadline,
    NoAnswer,
    no_worker,
    pollers_or_unknown,
    start_a_worker,
    within,
)

log = logging.getLogger(__name__)


# A live worker answers a query in milliseconds; one slower than this (and than a quarter of
# the command's share) is taken for gone. Unsticking a busy live worker's run costs a replay,
# so short bounds (`--wait 5`, a decision's outcome) do not unstick a loaded worker's runs.
STICKY_PATIENCE_SECONDS = 1.0


async def ask_within(
    client: Client,
    handle: WorkflowHandle[Any, Any],
    query: Any,
    deadline: Deadline,
    fraction: float = 0.5,
) -> Any:
    """A query, or NoAnswer when no worker answers within its share of the bound.

    The server sends a run's queries to the worker that last ran it (its sticky queue) for
    about ten seconds after that worker's last poll, so a killed worker's runs would not
    answer while its replacement polls. A quarter of the share (at least a second)
    unanswered, the run is unstuck (its next task goes to the shared queue, where any worker
    replays it) and asked again; the first query keeps its whole share, and whichever
    answers first is the answer. (More queries would not help: after the reset the second
    is answered at once, unless a task the dead worker held blocks every query alike.)
    """
    bound = Deadline(deadline.share(fraction))
    asks = {_asking(handle, query, bound)}
    try:
        patience = min(bound.left(), max(bound.share(0.25), STICKY_PATIENCE_SECONDS))
        done, _ = await asyncio.wait(asks, timeout=patience)
        if (not done or _unanswered(done.pop())) and not bound.ended():
            await unstick(client, handle.id, bound.left() / 2)
            log.debug("%s: no answer after %.1fs; asking again", handle.id, bound.spent())
            asks.add(_asking(handle, query, bound))
        while asks:
            done, asks = await asyncio.wait(asks, return_when=asyncio.FIRST_COMPLETED)
            for ask in done:
                if not _unanswered(ask):
                    return ask.result()
        raise NoAnswer
    finally:
        for ask in asks:
            ask.cancel()


def _asking(handle: WorkflowHandle[Any, Any], query: Any, bound: Deadline) -> asyncio.Future[Any]:
    asking = asyncio.ensure_future(_ask(handle, query, bound.left()))
    asking.add_done_callback(_read)
    return asking


def _read(ask: asyncio.Future[Any]) -> None:
    """Take a query's outcome as it ends: one no one waits for any more (another answered
    first, or the bound ended) would be logged as an error never retrieved."""
    if not ask.cancelled():
        ask.exception()


def _unanswered(ask: asyncio.Future[Any]) -> bool:
    """Whether a finished query went unanswered (any other error is the query's answer)."""
    return isinstance(ask.exception(), NoAnswer)


async def _ask(handle: WorkflowHandle[Any, Any], query: Any, seconds: float) -> Any:
    try:
        return await within(seconds, handle.query(query, rpc_timeout=timedelta(seconds=seconds)))
    except RPCError as err:
        # A query fails only at the server (the workflow's own failures are another error):
        # out of time, or, as the server also says, "no poller seen ... worker may be down".
        if err.status == RPCStatusCode.NOT_FOUND:
            raise no_run(handle.id) from err
        log.debug("%s: the server did not answer the query: %s", handle.id, err)
        raise NoAnswer from err


async def unstick(client: Client, workflow_id: str, seconds: float) -> None:
    """Free a run from the worker that last ran it (a cache, not state: a live worker that
    still holds the run replays it once more). Best effort; a closed run has nothing to free."""
    request = ResetStickyTaskQueueRequest(
        namespace=client.namespace, execution=WorkflowExecution(workflow_id=workflow_id)
    )
    try:
        await within(
            seconds,
            client.workflow_service.reset_sticky_task_queue(
                request, timeout=timedelta(seconds=seconds)
            ),
        )
    except (NoAnswer, RPCError) as err:
        log.debug("%s: could not free it from its last worker: %r", workflow_id, err)


def refusal(err: WorkflowUpdateFailedError) -> str:
    return getattr(err.cause, "message", None) or str(err.cause)


ACCEPTED = UpdateWorkflowExecutionLifecycleStage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ACCEPTED


class NotAdmitted(Exception):
    """The run did not take an update: the server refused to admit it (its limits), or no
    worker accepted it in time. Nothing the run holds; send a signal instead."""

    def __init__(self, reason: str, *, maybe_admitted: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        # Out of time, the server may have admitted it: it can still arrive, and the run's
        # checks (a decision applies once; pause and resume are idempotent) absorb a second.
        self.maybe_admitted = maybe_admitted


async def admit_update(
    client: Client,
    handle: WorkflowHandle[Any, Any],
    message: Message,
    arg: BaseModel,
    seconds: float,
) -> WorkflowUpdateHandle[Any]:
    """`message`'s update, accepted by the workflow (so its history holds it), or
    OperationError when its validator refused it, or NotAdmitted.

    The SDK retries an update the server will not admit ("limit on number of concurrent
    in-flight updates") for as long as the bound allows, so a command could not tell a full
    run from a slow worker; this one call, not retried, can.
    """
    update_id = uuid.uuid4().hex
    payloads = await client.data_converter.encode([arg])
    request = UpdateWorkflowExecutionRequest(
        namespace=client.namespace,
        workflow_execution=WorkflowExecution(workflow_id=handle.id),
        request=Request(
            meta=Meta(update_id=update_id, identity=client.identity),
            input=Input(name=message.update_name, args=Payloads(payloads=payloads)),
        ),
        wait_policy=WaitPolicy(lifecycle_stage=ACCEPTED),
    )
    try:
        response = await within(
            seconds,
            client.workflow_service.update_workflow_execution(
                request, retry=False, timeout=timedelta(seconds=seconds)
            ),
        )
    except NoAnswer as err:
        raise NotAdmitted(_not_accepted(seconds), maybe_admitted=True) from err
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise no_run(handle.id) from err
        if err.status in (RPCStatusCode.RESOURCE_EXHAUSTED, RPCStatusCode.FAILED_PRECONDITION):
            raise NotAdmitted(f"the server admits no more updates to it ({err.message})") from err
        if err.status in (
            RPCStatusCode.DEADLINE_EXCEEDED,
            RPCStatusCode.CANCELLED,
            RPCStatusCode.UNAVAILABLE,
        ):
            raise NotAdmitted(_not_accepted(seconds), maybe_admitted=True) from err
        raise OperationRefused(f"refused: {err.message}") from err
    if response.outcome.HasField("failure"):
        failure = await client.data_converter.decode_failure(response.outcome.failure)
        raise OperationRefused(f"refused: {getattr(failure, 'message', None) or failure}")
    if response.stage < ACCEPTED:
        raise NotAdmitted(_not_accepted(seconds), maybe_admitted=True)
    return handle.get_update_handle(
        update_id,
        workflow_run_id=response.update_ref.workflow_execution.run_id,
        result_type=message.result,
    )


def _not_accepted(seconds: float) -> str:
    return f"no worker accepted the update within {seconds:g}s"


async def signal_within(
    handle: WorkflowHandle[Any, Any], message: Message, arg: BaseModel, deadline: Deadline
) -> None:
    """`message`'s kept form, a signal the server confirmed (its history holds it), or
    OperationError saying it was not sent (the server refused it) or that its arrival is
    unknown (out of time)."""
    try:
        await within(
            deadline.left(),
            handle.signal(message.kept_signal, arg, rpc_timeout=timedelta(seconds=deadline.left())),
        )
    except NoAnswer as err:
        raise NotAnswered(
            f"not confirmed: the server did not confirm the signal to {handle.id} within "
            f"{deadline.seconds:g}s, so it may or may not hold it; `agentledger status "
            f"{handle.id}` shows whether it arrived"
        ) from err
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise no_run(handle.id) from err
        raise OperationRefused(f"not sent: the server refused the signal ({err.message})") from err


async def no_worker_note(client: Client, run: RunRef, deadline: Deadline) -> str:
    """Why no worker answered for the run, from who polls its task queue."""
    found = await pollers_or_unknown(client, run.task_queue, seconds=deadline.share(0.2))
    return no_worker(run.task_queue, found, deadline.seconds)


def recorded(what: str, run: RunRef) -> str:
    """What a write sent while no worker answered became: held in the run's history."""
    return (
        f"recorded: no worker answered, so the run holds the {what} in its history and applies "
        f"it, with the same checks, when a worker takes it ({start_a_worker(run.task_queue)}); "
        f"`agentledger status {run.handle.id}` shows the outcome"
    )


async def last_status(run: RunRef, mirror: AsyncConnectionPool | None) -> RunStatus:
    """What the run was last seen doing, without asking a worker: its search attribute, or,
    where that shows only "running" (agentledger.core.search_attributes), the mirror's row;
    with neither, queued."""
    shown = run.indexed_status
    if shown is not None and shown != search_attributes.RUNNING:
        return RunStatus(shown)
    found = await mirror_views.run_state(mirror, run.handle.id) if mirror is not None else None
    if found is not None:
        return found[0].status
    return RunStatus.QUEUED  # no worker has written its row: it has not started yet
