"""The client's calls as tests make them: one function per act, on a test's own Temporal
client (and pool), each building the `Scope` a command would and calling the client class
that does the work (`Runs`, `Approvals`, `Backlogs`, ...). A test names its tenant, mirror,
task queue and bound per call, as it sets up runs in many shapes; programs use `RunClient`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from typing import Any, Literal

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from agentledger.client import receipts, starts
from agentledger.client import watch as watching
from agentledger.client.approvals import Approvals
from agentledger.client.backlogs import (
    ENQUEUE_BATCH,
    Backlogs,
    live_state,
    load_tasks,
    send_tasks,
)
from agentledger.client.forks import default_key, parent_input
from agentledger.client.forks import fork_run as _fork_run
from agentledger.client.mirror import Mirror
from agentledger.client.runs import Runs
from agentledger.client.scope import (
    BACKLOG_RUN,
    DEFAULT_TENANT,
    ENGINE_ID_PREFIX,
    Held,
    Scope,
    caller_of,
    no_run,
    run_id,
    run_id_for,
)
from agentledger.client.sessions import ANSWER_WITHIN_SECONDS
from agentledger.client.sessions import chat as _chat
from agentledger.client.steering import Steering
from agentledger.client.tenants import Tenants
from agentledger.core.admission_models import TenantLimits
from agentledger.core.approver_key import ApproverKey
from agentledger.core.backlog_models import (
    BacklogControlResult,
    BacklogState,
    EnqueueResult,
    PolicyPatch,
    QueuedTask,
    RetryResult,
    TaskItem,
)
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.constants import DEFAULT_WAIT_SECONDS, TASK_QUEUE
from agentledger.core.errors import OperationError
from agentledger.core.identity import Identity
from agentledger.core.results import (
    ControlResult,
    DecisionResult,
    ForkOrigin,
    PendingApproval,
    RunResult,
    RunState,
    SayResult,
    WatchItem,
)
from agentledger.core.run_reports import RunReport, Started
from agentledger.core.spec import JsonDict, RunSpec
from agentledger.core.tenant_policy import RunPolicy
from agentledger.store import mirror_views

__all__ = [
    "BACKLOG_RUN",
    "DEFAULT_TENANT",
    "ENGINE_ID_PREFIX",
    "ENQUEUE_BATCH",
    "OperationError",
    "Started",
    "default_key",
    "load_tasks",
    "no_run",
    "parent_input",
    "run_id",
    "run_id_for",
]

start_run = starts.start_run


def scope(
    client: Client,
    mirror: AsyncConnectionPool | None = None,
    *,
    tenant: str | None = None,
    wait: float | None = None,
    task_queue: str = TASK_QUEUE,
    indexed: bool = True,
    payload_limit: int | None = None,
) -> Scope:
    """The scope a command acting for `tenant` (None: the operator) would have."""
    fields: dict[str, Any] = {"task_queue": task_queue, "search_attributes": indexed}
    if payload_limit is not None:
        fields["payload_limit_bytes"] = payload_limit
    return Scope.over(
        client,
        mirror,
        config=AgentLedgerConfig.model_construct(**fields),
        tenant=tenant,
        wait=wait,
    )


# ---------------------------------------------------------------- runs


async def start(
    client: Client,
    pool: AsyncConnectionPool | None,
    spec: RunSpec,
    *,
    task_queue: str,
    acting_tenant: str | None,
    indexed: bool = True,
    fork: ForkOrigin | None = None,
    wait: float | None = None,
) -> Started:
    """A start through the gate, as `client.runs.start` makes it."""
    on = scope(client, pool, tenant=acting_tenant, task_queue=task_queue, indexed=indexed)
    return await starts.start(on, spec, fork=fork, wait=wait)


async def policy(pool: AsyncConnectionPool, tenant: str) -> RunPolicy:
    return await starts.policy(pool, tenant)


async def backlog_tasks(
    pool: AsyncConnectionPool | None, tasks: list[TaskItem], *, acting_tenant: str | None
) -> list[QueuedTask]:
    return await starts.backlog_tasks(_mirror_only(pool, acting_tenant), tasks)


async def approve(
    client: Client,
    run_id: str,
    *,
    by: str,
    role: str,
    edit: JsonDict | None = None,
    replace: JsonDict | None = None,
    tenant: str | None = None,
    action_hash: str | None = None,
    wait: float = DEFAULT_WAIT_SECONDS,
    mirror: AsyncConnectionPool | None = None,
    signer: ApproverKey | None = None,
    decider: Identity | None = None,
) -> DecisionResult:
    return await Approvals(scope(client, mirror, tenant=tenant, wait=wait)).approve(
        run_id,
        by=by,
        role=role,
        edit=edit,
        replace=replace,
        action_hash=action_hash,
        signer=signer,
        decider=decider,
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
    wait: float = DEFAULT_WAIT_SECONDS,
    mirror: AsyncConnectionPool | None = None,
    signer: ApproverKey | None = None,
) -> DecisionResult:
    return await Approvals(scope(client, mirror, tenant=tenant, wait=wait)).reject(
        run_id, by=by, role=role, reason=reason, action_hash=action_hash, signer=signer
    )


async def pending_approval(
    client: Client,
    run_id: str,
    *,
    wait: float = DEFAULT_WAIT_SECONDS,
    tenant: str | None = None,
    mirror: AsyncConnectionPool | None = None,
) -> PendingApproval:
    return await Approvals(scope(client, mirror, tenant=tenant, wait=wait)).pending(run_id)


async def control(
    client: Client,
    run_id: str,
    act: Literal["pause", "resume"],
    *,
    by: str = "cli",
    wait: float = DEFAULT_WAIT_SECONDS,
    tenant: str | None = None,
    mirror: AsyncConnectionPool | None = None,
) -> ControlResult:
    steering = Steering(scope(client, mirror, tenant=tenant, wait=wait))
    return await (steering.pause if act == "pause" else steering.resume)(run_id, by=by)


async def cancel(
    client: Client,
    run_id: str,
    *,
    wait: float = DEFAULT_WAIT_SECONDS,
    tenant: str | None = None,
    mirror: AsyncConnectionPool | None = None,
) -> str:
    return await Runs(scope(client, mirror, tenant=tenant, wait=wait)).cancel(run_id)


async def result(
    client: Client,
    run_id: str,
    *,
    tenant: str | None = None,
    mirror: AsyncConnectionPool | None = None,
) -> RunResult:
    return await Runs(scope(client, mirror, tenant=tenant)).result(run_id)


async def status(
    client: Client,
    run_id: str,
    *,
    wait: float = DEFAULT_WAIT_SECONDS,
    tenant: str | None = None,
    mirror: AsyncConnectionPool | None = None,
) -> RunState:
    return await Runs(scope(client, mirror, tenant=tenant, wait=wait)).status(run_id)


async def inspect(
    client: Client,
    run_id: str,
    *,
    wait: float = DEFAULT_WAIT_SECONDS,
    tenant: str | None = None,
    mirror: AsyncConnectionPool | None = None,
) -> RunReport:
    return await Runs(scope(client, mirror, tenant=tenant, wait=wait)).inspect(run_id)


async def receipt(pool: AsyncConnectionPool, run_id: str, *, tenant: str | None = None) -> JsonDict:
    """The receipt as the mirror holds it (a dict, so a test reads any field of it)."""
    return await receipts.receipt_of(pool, run_id, tenant=tenant)


async def list_runs(
    pool: AsyncConnectionPool,
    *,
    status: str | None = None,
    limit: int = 50,
    tenant: str | None = None,
) -> list[JsonDict]:
    return await mirror_views.recent_runs(pool, status=status, limit=limit, tenant=tenant)


async def check_mirror(
    client: Client,
    pool: AsyncConnectionPool,
    run_id: str,
    *,
    payload_limit: int | None = None,
    tenant: str | None = None,
) -> JsonDict:
    on = scope(client, pool, tenant=tenant, payload_limit=payload_limit)
    return (await Mirror(on).check(run_id)).model_dump()


async def rebuild_mirror(
    client: Client,
    pool: AsyncConnectionPool,
    run_id: str,
    *,
    payload_limit: int | None = None,
    tenant: str | None = None,
) -> JsonDict:
    on = scope(client, pool, tenant=tenant, payload_limit=payload_limit)
    return (await Mirror(on).rebuild(run_id)).model_dump()


async def say(
    client: Client,
    run_id: str,
    text: str,
    *,
    by: str = "cli",
    message_id: str | None = None,
    wait: float = DEFAULT_WAIT_SECONDS,
    tenant: str | None = None,
    mirror: AsyncConnectionPool | None = None,
) -> SayResult:
    return await Steering(scope(client, mirror, tenant=tenant, wait=wait)).say(
        run_id, text, by=by, message_id=message_id
    )


async def end_session(
    client: Client,
    run_id: str,
    *,
    by: str = "cli",
    wait: float = DEFAULT_WAIT_SECONDS,
    tenant: str | None = None,
    mirror: AsyncConnectionPool | None = None,
) -> ControlResult:
    return await Steering(scope(client, mirror, tenant=tenant, wait=wait)).end_session(
        run_id, by=by
    )


async def fork_run(
    client: Client,
    pool: AsyncConnectionPool,
    run_id: str,
    *,
    from_step: int,
    edit_output: Any = None,
    key: str | None = None,
    task_queue: str,
    indexed: bool = True,
    tenant: str | None = None,
) -> Started:
    on = scope(client, pool, tenant=tenant, task_queue=task_queue, indexed=indexed)
    return await _fork_run(on, run_id, from_step=from_step, edit_output=edit_output, key=key)


def watch(
    client: Client,
    run_id: str,
    *,
    pool: AsyncConnectionPool | None = None,
    from_offset: int = 0,
    poll_cooldown: timedelta = timedelta(milliseconds=100),
    tenant: str | None = None,
) -> AsyncIterator[WatchItem]:
    return watching.watch(
        scope(client, pool, tenant=tenant),
        run_id,
        from_offset=from_offset,
        poll_cooldown=poll_cooldown,
    )


def chat(
    client: Client,
    run_id: str,
    text: str | None,
    *,
    by: str = "cli",
    from_offset: int = 0,
    wait: float = DEFAULT_WAIT_SECONDS,
    answer_within: float = ANSWER_WITHIN_SECONDS,
    tenant: str | None = None,
    mirror: AsyncConnectionPool | None = None,
) -> AsyncIterator[WatchItem]:
    return _chat(
        scope(client, mirror, tenant=tenant, wait=wait),
        run_id,
        text,
        by=by,
        from_offset=from_offset,
        wait=wait,
        answer_within=answer_within,
    )


async def set_tenant(
    client: Client,
    pool: AsyncConnectionPool,
    tenant: str,
    changes: dict[str, Any],
    *,
    task_queue: str,
) -> TenantLimits:
    return await Tenants(scope(client, pool, task_queue=task_queue)).set(tenant, changes)


# ---------------------------------------------------------------- backlogs


async def enqueue(
    client: Client,
    agent: str,
    tasks: Sequence[TaskItem],
    *,
    task_queue: str,
    policy: PolicyPatch | None = None,
    by: str = "cli",
    wait: float = DEFAULT_WAIT_SECONDS,
    tenant: str | None = None,
) -> EnqueueResult:
    """Tasks sent as they are, past the gate (as a backlog's own tests set one up)."""
    on = scope(client, tenant=tenant, task_queue=task_queue)
    return await send_tasks(on, agent, tasks, policy=policy, by=by, wait=wait)


async def stop(
    client: Client,
    agent: str,
    *,
    by: str = "cli",
    wait: float = DEFAULT_WAIT_SECONDS,
    tenant: str | None = None,
    mirror: AsyncConnectionPool | None = None,
) -> BacklogControlResult:
    return await Backlogs(scope(client, mirror, tenant=tenant, wait=wait)).stop(agent, by=by)


async def resume(
    client: Client,
    agent: str,
    *,
    by: str = "cli",
    wait: float = DEFAULT_WAIT_SECONDS,
    tenant: str | None = None,
    mirror: AsyncConnectionPool | None = None,
) -> BacklogControlResult:
    return await Backlogs(scope(client, mirror, tenant=tenant, wait=wait)).resume(agent, by=by)


async def retry(
    client: Client,
    agent: str,
    key: str,
    *,
    by: str = "cli",
    wait: float = DEFAULT_WAIT_SECONDS,
    tenant: str | None = None,
    mirror: AsyncConnectionPool | None = None,
) -> RetryResult:
    return await Backlogs(scope(client, mirror, tenant=tenant, wait=wait)).retry(agent, key, by=by)


async def state(client: Client, agent: str, *, wait: float = DEFAULT_WAIT_SECONDS) -> BacklogState:
    return await live_state(scope(client, wait=wait), agent)


async def list_tasks(
    pool: AsyncConnectionPool, agent: str, *, tenant: str | None = None
) -> JsonDict:
    listing = await Backlogs(_mirror_only(pool, tenant)).tasks(agent)
    return listing.model_dump()


async def dead_letters(
    pool: AsyncConnectionPool, agent: str, *, tenant: str | None = None
) -> list[JsonDict]:
    return [task.model_dump() for task in await Backlogs(_mirror_only(pool, tenant)).dead(agent)]


# ---------------------------------------------------------------- scopes without Temporal


def _mirror_only(pool: AsyncConnectionPool | None, tenant: str | None) -> Scope:
    """The scope of a read (or a gate's check) that needs the mirror alone."""
    no_temporal: Any = None
    return Scope(
        caller_of(AgentLedgerConfig.model_construct(tenant=tenant)),
        AgentLedgerConfig.model_construct(),
        Held(no_temporal, pool),
    )
