"""Starting a capped tenant's run through its admission workflow, and asking where it stands.

Client operations over agentledger.workflows.admission; `operations.start_run` calls
`enqueue_run`
for every tenant with a cap, so callers never choose.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections.abc import Iterator
from typing import Any

from temporalio.client import Client, WithStartWorkflowOperation, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from agentledger.core import constants as names
from agentledger.core import fairness
from agentledger.core._state import RunInput
from agentledger.core.admission_models import (
    AdmissionInput,
    MoveInput,
    PositionInput,
    QueuedStart,
    QueuedStartInput,
    QueuePosition,
    TenantLimits,
)
from agentledger.core.errors import OperationError, OperationRefused
from agentledger.temporal.worker_presence import (
    Deadline,
    NoAnswer,
    Poller,
    fresh_pollers,
    no_worker,
    within,
)
from agentledger.workflows.admission import TenantAdmissionWorkflow, admission_id


async def enqueue_run(
    client: Client,
    run_id: str,
    spec: RunInput,
    *,
    task_queue: str,
    indexed: bool,
    limits: TenantLimits,
    seconds: float | None = None,
) -> QueuedStart:
    """Queue the run (creating the tenant's queue on first use); it exists, `queued`, on
    return, with its place among the waiting runs (None: admitted at once).

    The queue is a workflow and only a worker admits to it. With `seconds` (a command's
    `--wait`): with no worker polling, nothing is sent (OperationError, saying so); with one
    that does not answer in time, the OperationError says the start was sent and its outcome
    is unknown. Without, it waits for a worker and rides out a busy queue for BUSY_SECONDS."""
    deadline = Deadline(UNBOUNDED_SECONDS if seconds is None else seconds)
    found: list[Poller] = []
    if seconds is not None:
        found = await fresh_pollers(client, task_queue, seconds=deadline.share(0.5))
        if not found:
            raise OperationError(f"not started: {no_worker(task_queue, found, seconds)}")

    def start() -> WithStartWorkflowOperation[Any, Any]:
        """A with-start operation is used once: each try gets its own."""
        return WithStartWorkflowOperation(
            TenantAdmissionWorkflow.run,
            AdmissionInput(tenant=spec.tenant, limits=limits, keeps_limits=True),
            id=admission_id(spec.tenant),
            task_queue=task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            priority=fairness.run_priority(fairness.HIGHEST_PRIORITY, spec.tenant, limits.weight),
        )

    # One id for every try of this call: a try that the server (or the SDK, on its own)
    # repeats after the queue took it is this start, not someone else's with the same key.
    request = QueuedStartInput(
        run_id=run_id,
        spec=spec,
        task_queue=task_queue,
        indexed=indexed,
        limits=limits,
        request_id=uuid.uuid4().hex,
    )
    busy_until = time.monotonic() + min(BUSY_SECONDS, deadline.seconds)
    for pause in backoff():
        try:
            # The SDK's overloads do not see through an async update handler's return type.
            result: QueuedStart = await within(
                deadline.left(),
                client.execute_update_with_start_workflow(
                    TenantAdmissionWorkflow.enqueue,  # type: ignore[arg-type]
                    request,
                    start_workflow_operation=start(),
                ),
            )
            return result
        except NoAnswer as err:
            raise OperationError(
                f"sent, but {no_worker(task_queue, found, deadline.seconds)}: whether run {run_id} "
                f"was queued is unknown; `agentledger status {run_id}` says"
            ) from err
        except WorkflowUpdateFailedError as err:
            reason = getattr(err.cause, "message", None) or str(err.cause)
            if names.MOVING_TO_CURRENT_BUILD not in reason or time.monotonic() > busy_until:
                # Past a hard limit: nothing was started or queued; the reason names it.
                raise OperationRefused(f"refused: {reason}") from err
            # The queue continues as new onto the current build once woken (a refused
            # update wakes nothing): this start goes there.
            with contextlib.suppress(NoAnswer, RPCError):  # the next try says what became of it
                await within(deadline.left(), _wake(client, spec.tenant))
            await asyncio.sleep(min(pause, deadline.left()))
            continue
        except RPCError as err:
            # The server takes a bounded number of updates per workflow at once (10 by
            # default) and aborts some of a burst that races to create the queue; a burst of
            # starts for one tenant waits its turn. Enqueueing one run twice is a no-op.
            if err.status not in BUSY or time.monotonic() > busy_until:
                raise
            await asyncio.sleep(min(pause, deadline.left()))
    raise AssertionError("unreachable: backoff() never ends")


async def _wake(client: Client, tenant: str) -> None:
    """Wake a queue that turned a start away while it moves to the current build."""
    handle = client.get_workflow_handle_for(TenantAdmissionWorkflow.run, admission_id(tenant))
    await handle.signal(TenantAdmissionWorkflow.move, MoveInput())


BUSY_SECONDS = 60.0
# "No bound": a library caller that gives none waits for a worker as long as it takes.
UNBOUNDED_SECONDS = 10.0 * 365 * 24 * 3600
BUSY = (RPCStatusCode.RESOURCE_EXHAUSTED, RPCStatusCode.UNAVAILABLE)


def backoff() -> Iterator[float]:
    """Pauses between tries at a busy queue: growing to a second, jittered so a burst of
    starters does not come back in step."""
    pause = 0.02
    while True:
        yield pause * random.uniform(0.5, 1.5)
        pause = min(pause * 2, 1.0)


async def position(client: Client, workflow_id: str, run_id: str) -> QueuePosition | None:
    """Where the run stands in its tenant's queue; None if the queue is gone."""
    handle = client.get_workflow_handle_for(TenantAdmissionWorkflow.run, workflow_id)
    try:
        return await handle.query(TenantAdmissionWorkflow.position, PositionInput(run_id=run_id))
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise


async def configure(client: Client, limits: TenantLimits) -> QueuePosition | None:
    """Give a running queue new limits (a higher cap admits waiting runs at once)."""
    handle = client.get_workflow_handle_for(
        TenantAdmissionWorkflow.run, admission_id(limits.tenant)
    )
    try:
        return await handle.execute_update(TenantAdmissionWorkflow.configure, limits)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
