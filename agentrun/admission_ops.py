"""Starting a capped tenant's run through its admission workflow, and asking where it stands.

Client operations over workflows/admission.py; `operations.start_run` calls `enqueue_run`
for every tenant with a cap, so callers never choose.
"""

from __future__ import annotations

from temporalio.client import Client, WithStartWorkflowOperation, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from agentrun import fairness
from agentrun.admission_models import (
    AdmissionInput,
    PositionInput,
    QueuedStart,
    QueuedStartInput,
    QueuePosition,
    TenantLimits,
)
from agentrun.models import RunSpec
from workflows.admission import TenantAdmissionWorkflow, admission_id


class Refused(Exception):
    """A start past a hard limit: nothing was started or queued; the message names it."""


async def enqueue_run(
    client: Client,
    run_id: str,
    spec: RunSpec,
    *,
    task_queue: str,
    indexed: bool,
    limits: TenantLimits,
) -> QueuedStart:
    """Queue the run (creating the tenant's queue on first use); it exists, `queued`, on
    return, with its place among the waiting runs (None: admitted at once)."""
    start = WithStartWorkflowOperation(
        TenantAdmissionWorkflow.run,
        AdmissionInput(tenant=spec.tenant, limits=limits),
        id=admission_id(spec.tenant),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        priority=fairness.run_priority(fairness.HIGHEST_PRIORITY, spec.tenant, limits.weight),
    )
    request = QueuedStartInput(
        run_id=run_id, spec=spec, task_queue=task_queue, indexed=indexed, limits=limits
    )
    try:
        # The SDK's overloads do not see through an async update handler's return type.
        result: QueuedStart = await client.execute_update_with_start_workflow(
            TenantAdmissionWorkflow.enqueue,  # type: ignore[arg-type]
            request,
            start_workflow_operation=start,
        )
    except WorkflowUpdateFailedError as err:
        reason = getattr(err.cause, "message", None) or str(err.cause)
        raise Refused(reason) from err
    return result


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
