"""What people do with runs: start, decide, pause, resume, cancel, inspect.

The CLI is a thin shell over these; tests call them directly with their own client.
Every failure becomes an `OperationError` whose message says what to do next.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from psycopg_pool import AsyncConnectionPool
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from agentrun.core import constants as names
from agentrun.core import fairness, run_summaries, search_attributes
from agentrun.core.admission_models import TenantLimits
from agentrun.core.errors import OperationError
from agentrun.core.keys import id_part
from agentrun.core.models import (
    ApproveInput,
    ControlInput,
    ControlResult,
    DecisionResult,
    JsonDict,
    PendingApproval,
    RejectInput,
    RunSpec,
    RunState,
)
from agentrun.core.payload_limits import DEFAULT_LIMIT_BYTES
from agentrun.core.states import RunStatus
from agentrun.ops import admission_ops, handles, projection
from agentrun.store import tool_sets
from agentrun.store.fork_store import ForkStore
from agentrun.store.mirror_store import MirrorStore
from workflows import AgentRunWorkflow


@dataclass
class Started:
    run_id: str
    existing: bool
    queue_position: int | None = None  # waiting for a slot of its tenant's cap


def run_id_for(key: str | None) -> str:
    """The workflow id for an idempotency key: readable, and distinct for distinct keys."""
    if key is None:
        return names.RUN_ID_PREFIX + uuid.uuid4().hex[:12]
    return names.RUN_ID_PREFIX + id_part(key)


async def start_run(
    client: Client,
    spec: RunSpec,
    *,
    task_queue: str,
    indexed: bool = True,
    limits: TenantLimits | None = None,
    mirror: AsyncConnectionPool | None = None,
) -> Started:
    """Start a run; the same idempotency key always names the same run, running or ended.

    `indexed` sets the search attributes (agent, tenant, status, priority) the Web UI filters
    on. The run's priority and its tenant (the fairness key, weighted by `limits.weight`)
    reach every step it schedules. A tenant with a cap starts through its admission queue.
    With the `mirror`, a run Temporal has forgotten (its retention passed) is still the same
    run: its id is not started again over the old run's conversation, journal and ledger,
    and the caller is told it exists (its receipt is in the mirror).
    """
    if spec.carry is not None:
        raise OperationError("`carry` is set by the engine when a run continues; leave it out")
    if spec.admission is not None:
        raise OperationError("`admission` is set by the engine; leave it out")
    limits = limits or TenantLimits(tenant=spec.tenant)
    run_id = run_id_for(spec.idempotency_key)
    if mirror is not None and await _mirrored(mirror, run_id):
        return Started(run_id, existing=True)
    if limits.capped:
        try:
            queued = await admission_ops.enqueue_run(
                client, run_id, spec, task_queue=task_queue, indexed=indexed, limits=limits
            )
        except admission_ops.Refused as err:
            raise OperationError(f"refused: {err}") from err
        return Started(run_id, existing=queued.existing, queue_position=queued.position)
    try:
        await client.start_workflow(
            AgentRunWorkflow.run,
            spec,
            id=run_id,
            task_queue=task_queue,
            search_attributes=(
                search_attributes.for_run(
                    spec.agent, spec.tenant, RunStatus.QUEUED.value, spec.priority
                )
                if indexed
                else None
            ),
            priority=fairness.run_priority(spec.priority, spec.tenant, limits.weight),
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            # What the Web UI shows above the timeline: who, for whom, what.
            static_summary=run_summaries.static_summary(spec),
            static_details=run_summaries.static_details(spec, run_id),
        )
    except WorkflowAlreadyStartedError:
        return Started(run_id, existing=True)
    except RPCError as err:
        if (
            indexed
            and err.status == RPCStatusCode.INVALID_ARGUMENT
            and "search attribute" in (err.message.lower())
        ):
            raise OperationError(
                f"the cluster lacks agentrun's search attributes ({err.message}): start a "
                "worker once (it registers them) or set AGENTRUN_SEARCH_ATTRIBUTES=0"
            ) from err
        raise
    return Started(run_id, existing=False)


async def require_tools(pool: AsyncConnectionPool, task_queue: str, tools: list[str]) -> None:
    """Refuse a run naming a tool the queue's workers lack, before it starts."""
    served = await tool_sets.served_tools(pool, task_queue)
    if served is None:
        raise OperationError(
            f"no worker has served task queue {task_queue!r} yet, so its tools are unknown: "
            "start one (`python worker.py --tools ...`), then start the run"
        )
    missing = sorted(set(tools) - set(served))
    if missing:
        raise OperationError(
            f"the workers on task queue {task_queue!r} have no tool {', '.join(missing)} "
            f"(they have: {', '.join(served) or 'none'}); start them with the tools the "
            "agent names, or fix its profile"
        )


async def _mirrored(pool: AsyncConnectionPool, run_id: str) -> bool:
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT 1 FROM runs WHERE run_id = %s", (run_id,))
        return await cur.fetchone() is not None


async def _handle(client: Client, run_id: str) -> tuple[WorkflowHandle[Any, Any], bool]:
    """The run's handle and whether it is still running; unknown runs are a clear error."""
    handle, status = await handles.described(client, run_id, missing=_missing(run_id))
    return handle, status == WorkflowExecutionStatus.RUNNING


def _missing(run_id: str) -> str:
    return f"no run {run_id!r}: `starter.py list` shows the runs"


async def _running(client: Client, run_id: str) -> WorkflowHandle[Any, Any]:
    return await handles.running(
        client,
        run_id,
        missing=_missing(run_id),
        ended=lambda _: f"run {run_id} has already ended; `starter.py receipt {run_id}` shows how",
    )


async def pending_approval(client: Client, run_id: str) -> PendingApproval:
    handle = await _running(client, run_id)
    pending: PendingApproval | None = await handle.query(AgentRunWorkflow.get_pending_approval)
    if pending is None:
        state: RunState = await handle.query(AgentRunWorkflow.state)
        raise OperationError(
            f"run {run_id} is not waiting for an approval (status {state.status.value})"
        )
    return pending


async def approve(
    client: Client,
    run_id: str,
    *,
    by: str,
    role: str,
    edit: JsonDict | None = None,
    tenant: str | None = None,
    action_hash: str | None = None,
) -> DecisionResult:
    """Approve the pending action (or, with `action_hash`, only that exact action)."""
    return await _decide(
        client,
        run_id,
        AgentRunWorkflow.approve,
        lambda pending: ApproveInput(
            action_hash=action_hash or pending, by=by, role=role, edit=edit, tenant=tenant
        ),
    )


async def reject(
    client: Client,
    run_id: str,
    *,
    by: str,
    role: str,
    reason: str,
    tenant: str | None = None,
    action_hash: str | None = None,
) -> DecisionResult:
    return await _decide(
        client,
        run_id,
        AgentRunWorkflow.reject,
        lambda pending: RejectInput(
            action_hash=action_hash or pending, by=by, role=role, reason=reason, tenant=tenant
        ),
    )


async def _decide(
    client: Client,
    run_id: str,
    update: Any,
    decision: Callable[[str], ApproveInput | RejectInput],
) -> DecisionResult:
    """Send a decision bound to the action pending now; the workflow's validator judges it."""
    pending = await pending_approval(client, run_id)
    handle = client.get_workflow_handle(run_id)
    return await handles.update(handle, update, decision(pending.action_hash))  # type: ignore[no-any-return]


async def pause(client: Client, run_id: str, *, by: str = "cli") -> ControlResult:
    handle = await _running(client, run_id)
    return await handles.update(handle, AgentRunWorkflow.pause, ControlInput(by=by))  # type: ignore[no-any-return]


async def resume(client: Client, run_id: str, *, by: str = "cli") -> ControlResult:
    handle = await _running(client, run_id)
    return await handles.update(handle, AgentRunWorkflow.resume, ControlInput(by=by))  # type: ignore[no-any-return]


async def cancel(client: Client, run_id: str) -> None:
    handle = await _running(client, run_id)
    await handle.cancel()


async def status(client: Client, run_id: str) -> RunState:
    """The live state, from the workflow itself (a worker answers the query); a run waiting
    for its tenant's slot says where it stands in the queue."""
    handle, _ = await _handle(client, run_id)
    try:
        state: RunState = await handle.query(AgentRunWorkflow.state)
    except RPCError as err:
        raise OperationError(
            f"run {run_id} did not answer ({err.message}): is a worker running? "
            "Start one with `python worker.py`"
        ) from err
    if state.status == RunStatus.QUEUED and state.admission is not None:
        place = await admission_ops.position(client, state.admission, run_id)
        state = state.model_copy(update={"queue_position": place.position if place else None})
    return state


async def list_runs(
    pool: AsyncConnectionPool, *, status: str | None = None, limit: int = 50
) -> list[JsonDict]:
    async with pool.connection() as conn:
        cur = await conn.execute(
            """SELECT run_id, status, tenant, priority, user_id, task, current_step_id, tokens_in,
                      tokens_out, cost_usd::float, duplicates_prevented, created_at, finished_at
               FROM runs WHERE %(status)s::text IS NULL OR status = %(status)s
               ORDER BY created_at DESC LIMIT %(limit)s""",
            {"status": status, "limit": limit},
        )
        columns = [c.name for c in cur.description or []]
        return [dict(zip(columns, row, strict=True)) for row in await cur.fetchall()]


async def receipt(pool: AsyncConnectionPool, run_id: str) -> JsonDict:
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT receipt FROM receipts WHERE run_id = %s", (run_id,))
        row = await cur.fetchone()
        if row is None:
            cur = await conn.execute("SELECT status FROM runs WHERE run_id = %s", (run_id,))
            run = await cur.fetchone()
            if run is None:
                raise OperationError(f"no run {run_id!r} in the mirror: `starter.py list`")
            raise OperationError(
                f"run {run_id} has no receipt yet (status {run[0]}); receipts are written "
                "when a run ends"
            )
    # Forks made after the receipt was written: the link lives in `run_forks`.
    return {**dict(row[0]), "forks": await ForkStore(pool).forks_of(run_id)}


async def check_mirror(
    client: Client,
    pool: AsyncConnectionPool,
    run_id: str,
    *,
    payload_limit: int = DEFAULT_LIMIT_BYTES,
) -> JsonDict:
    """Compare the run's mirror rows with those its Temporal history derives."""
    _, running = await _handle(client, run_id)
    found = await projection.check(client, pool, run_id, payload_limit=payload_limit)
    counts = {kind: sum(d.kind == kind for d in found) for kind in projection.KINDS}
    return {
        "run_id": run_id,
        "open": running,
        "agrees": not found,
        "counts": counts,
        "differences": [str(d) for d in found],
    }


async def rebuild_mirror(
    client: Client,
    pool: AsyncConnectionPool,
    run_id: str,
    *,
    payload_limit: int = DEFAULT_LIMIT_BYTES,
) -> JsonDict:
    """Rewrite an ended run's mirror rows from its Temporal history, then check them."""
    _, running = await _handle(client, run_id)
    if running:
        raise OperationError(
            f"run {run_id} is still running and keeps writing its mirror; rebuild it once "
            f"it ends (`starter.py mirror check {run_id}` compares it now)"
        )
    derived = await projection.project(client, run_id, payload_limit=payload_limit)
    if derived.run is None:
        raise OperationError(f"run {run_id}'s history holds no mirror write to rebuild from")
    await MirrorStore(pool).rebuild(derived.batch(), derived.receipt)
    return await check_mirror(client, pool, run_id, payload_limit=payload_limit)
