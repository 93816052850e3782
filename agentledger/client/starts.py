"""The one gate every run comes in by: the tenant's policy, read here, never passed in.

Every path that starts a run (the CLI's `start`, `client.runs.start`, a fork, `demo`, a
capped tenant's queue, the HTTP server's faces, a webhook's delivery) calls `start`. It
reads the tenant's policy from Postgres itself: the operator's rules for its runs (agents,
free-form specs, approval rules), its registered approvers (a spec may add approvers, never
remove the tenant's), its cap, its weight, its model-call rate, the priorities it may take
(a start at another is refused), and its budgets (a start while an enforcing budget of the
tenant, or of the caller's credential, is spent is refused until it resets); and resolves
the run under it for the scope's caller with `agentledger.core.tenant_policy.resolve`, the
one function every start uses. No caller hands it limits, rules or approvers, so a caller
with stale or chosen ones changes nothing; without a database there is no policy to read,
and the start is refused. An idempotency key names one request: the same key with another
request is refused, naming the first run (a session's key with another task is a message
to it: agentledger.client.runs). The run is charged to the caller's credential
(`charged_to`) beside its tenant.
A test fails if any other module starts a run. Runs a workflow starts as its
children (a backlog's tasks, `run_agent`) read the same policy through an activity just
before they start, and a sub-agent's run takes its parent's (agentledger.workflows.run_starts,
the one way a workflow starts a run).

Run ids are scoped by tenant (agentledger.client.scope, `run_id`): the same key in two
tenants names two runs. The engine's own runs take ids no direct start can: forks under
`run-~`, backlog runs `run-AGENT.KEY.N` (a direct start's key of that shape is scoped
instead).
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from agentledger.client import admission
from agentledger.client.scope import (
    NO_DATABASE,
    Origin,
    Scope,
    run_id,
    run_id_for,
    started_unscoped,
)
from agentledger.core import bounds, fairness, run_summaries, search_attributes
from agentledger.core._state import RunInput
from agentledger.core.admission_models import TenantLimits
from agentledger.core.advice import start_a_worker
from agentledger.core.backlog_models import QueuedTask, TaskItem
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.constants import DEMO_AGENTS
from agentledger.core.errors import (
    BudgetExceeded,
    IdempotencyConflict,
    OperationError,
    OperationRefused,
    SetupError,
)
from agentledger.core.keys import canonical_json
from agentledger.core.results import ForkOrigin, TriggerOrigin
from agentledger.core.run_reports import Started
from agentledger.core.spec import JsonDict, RunSpec
from agentledger.core.states import RunStatus
from agentledger.core.tenant_policy import RunPolicy, resolve
from agentledger.profiles import load_agents
from agentledger.store import tool_sets
from agentledger.store.budget_store import BudgetStore
from agentledger.store.run_requests import RunRequestStore
from agentledger.store.tenant_store import TenantStore
from agentledger.workflows import AgentRunWorkflow
from agentledger.workflows.changes import for_new_run


async def policy(pool: AsyncConnectionPool, tenant: str) -> RunPolicy:
    """The tenant's policy as Postgres holds it now."""
    return await TenantStore(pool).policy(tenant)


def allowed(spec: RunSpec, found: RunPolicy) -> None:
    """Refuse a run at a priority its tenant may not take."""
    refusal = found.limits.priority_refusal(spec.priority)
    if refusal is not None:
        raise OperationRefused(refusal)


def operator_profiles(settings: AgentLedgerConfig) -> dict[str, JsonDict]:
    """The operator's agent profiles (AGENTLEDGER_AGENTS, else the demo's) as the run-spec
    fields each sets: what the gate holds a run naming one to."""
    source = settings.agents or DEMO_AGENTS
    agents = load_agents(source)
    return {name: agent.spec_fields(agents) for name, agent in agents.items()}


def request_fingerprint(spec: RunSpec, fork: ForkOrigin | None) -> str:
    """What an idempotency key names: the request as the caller made it (its spec but the
    key, and a fork's origin), before the policy made a run of it; a session's, but its
    task."""
    # A session's key with another task is a message to it (agentledger.client.runs).
    same = {"idempotency_key", "task"} if spec.session is not None else {"idempotency_key"}
    asked = {
        "spec": spec.model_dump(mode="json", exclude=same),
        "fork": fork.model_dump(mode="json", exclude={"effect_scope"}) if fork else None,
    }
    return hashlib.sha256(canonical_json(asked).encode()).hexdigest()


async def start(
    scope: Scope,
    spec: RunSpec,
    *,
    fork: ForkOrigin | None = None,
    trigger: TriggerOrigin | None = None,
    wait: float | None = None,
) -> Started:
    """Start a run for the caller (a run of another tenant is refused), under its tenant's
    policy, read from the scope's database and resolved for the caller (its identity is the
    run's requester); the same key (in the same tenant) always names the same run, and
    another request under it is refused. With `fork`, the run is a fork from that origin
    (agentledger.client.forks): its spec is the parent's, so no spec of the caller's own
    is checked against the tenant's free-form rule; with `trigger`, the hook delivery that
    started it."""
    pool = await scope.mirror()
    if pool is None:
        raise SetupError(NO_DATABASE)
    if isinstance(spec, RunInput):  # what the engine sets is the engine's to set
        spec = spec.spec()
    spec = scope.spec_for(spec)
    found = await policy(pool, spec.tenant)
    allowed(spec, found)
    caller = scope.caller
    run = resolve(
        spec,
        found,
        requester=caller.identity,
        roles=None if fork is not None else caller.roles,
        profiles=operator_profiles(scope.config),
        fork=fork,
    )
    origin: Origin = "start" if fork is None else "fork"
    legacy = await started_unscoped(pool, spec, origin=origin)
    if legacy is not None:
        return Started(legacy, existing=True)
    scoped = run_id(spec.tenant, spec.idempotency_key, origin=origin)
    charged_to = caller.credential
    await within_budget(pool, spec.tenant, charged_to)
    run = run.model_copy(update={"charged_to": charged_to, "trigger": trigger})
    requests = RunRequestStore(pool)
    claimed = False
    if spec.idempotency_key is not None:
        asked = request_fingerprint(spec, fork)
        first = await requests.claim(scoped, spec.tenant, asked)
        if first is not None and first != asked:
            raise IdempotencyConflict(
                f"idempotency key {spec.idempotency_key!r} already started run {scoped} from a "
                "different request; send that request again for that run, or use a new key",
                scoped,
            )
        claimed = first is None
    try:
        started = await start_run(
            await scope.temporal(),
            run,
            task_queue=scope.config.task_queue,
            indexed=scope.config.search_attributes,
            limits=found.limits,
            mirror=pool,
            run_id=scoped,
            wait=wait,
        )
    except OperationRefused:
        if claimed:  # nothing started: the key names no request yet
            await requests.release(scoped)
        raise
    return started


async def within_budget(pool: AsyncConnectionPool, tenant: str, charged_to: str | None) -> None:
    """Refuse a start while an enforcing budget of `tenant`, or of the credential it is
    charged to, is spent (agentledger.core.budgets), saying when it resets."""
    refusal = await BudgetStore(pool).start_refusal(tenant, charged_to, datetime.now(UTC))
    if refusal is not None:
        reason, reset_at = refusal
        raise BudgetExceeded(f"refused: {reason}", reset_at)


async def triggered(scope: Scope, spec: RunSpec) -> RunInput:
    """A spec a trigger will start later (each fire of a schedule): held now to the caller's
    tenant and its policy, as a start is, and charged to the caller. Each fire reads its
    tenant's policy again when it starts its run (agentledger.workflows.run_starts)."""
    pool = await scope.mirror()
    if pool is None:
        raise SetupError(NO_DATABASE)
    spec = scope.spec_for(spec)
    found = await policy(pool, spec.tenant)
    allowed(spec, found)
    caller = scope.caller
    run = resolve(
        spec,
        found,
        requester=caller.identity,
        roles=caller.roles,
        profiles=operator_profiles(scope.config),
    )
    return run.model_copy(update={"charged_to": caller.credential})


async def backlog_tasks(scope: Scope, tasks: list[TaskItem]) -> list[QueuedTask]:
    """A backlog's tasks as its runs will start: each of the caller's tenant (a task of
    another is refused), resolved under its tenant's policy for the caller (`resolve`, as a
    start is: a task's own spec is held to its agent's profile, or is a free-form spec only
    the tenant's policy may allow). The backlog workflow starts them as its children; what
    it starts is what passed here."""
    pool = await scope.mirror()
    if pool is None:
        raise SetupError(NO_DATABASE)
    specs = [scope.task_for(task) for task in tasks]
    policies = {each: await policy(pool, each) for each in {spec.tenant for spec in specs}}
    profiles = operator_profiles(scope.config)
    caller = scope.caller
    ready: list[QueuedTask] = []
    for task, spec in zip(tasks, specs, strict=True):
        # A capped tenant's task waits in its queue when the backlog starts it (the
        # backlog reads the policy again then, agentledger.workflows.backlog).
        allowed(spec, policies[spec.tenant])
        run = resolve(
            spec,
            policies[spec.tenant],
            requester=caller.identity,
            roles=caller.roles,
            profiles=profiles,
        )
        ready.append(QueuedTask.model_validate({**dict(task), "spec": run}))
    return ready


async def start_run(
    client: Client,
    spec: RunSpec,
    *,
    task_queue: str,
    indexed: bool = True,
    limits: TenantLimits | None = None,
    mirror: AsyncConnectionPool | None = None,
    run_id: str | None = None,
    wait: float | None = None,
) -> Started:
    """The engine's start, under the policy given: only `start` above calls it
    (a test holds it to that), with the policy it read; tests call it to set up runs. The same
    idempotency key always names the same run (`run_id`, else `run_id_for` the key).

    `indexed` sets the search attributes (agent, tenant, status, priority) the Web UI filters
    on. The run's priority and its tenant (the fairness key, weighted by `limits.weight`)
    reach every step it schedules. A tenant with a cap starts through its admission queue.
    With the `mirror`, a run Temporal has forgotten (its retention passed) is still the same
    run: its id is not started again over the old run's conversation, journal and ledger,
    and the caller is told it exists (its receipt is in the mirror). With `wait` (a
    command's), a capped tenant's start gives up after that long (admission.enqueue_run).
    """
    bounds.check(spec, "run spec")
    run = for_new_run(spec)
    limits = limits or TenantLimits(tenant=run.tenant)
    run_id = run_id or run_id_for(run.idempotency_key)
    if mirror is not None and await _mirrored(mirror, run_id):
        return Started(run_id, existing=True)
    if limits.capped:
        queued = await admission.enqueue_run(
            client,
            run_id,
            run,
            task_queue=task_queue,
            indexed=indexed,
            limits=limits,
            seconds=wait,
        )
        return Started(run_id, existing=queued.existing, queue_position=queued.position)
    try:
        await client.start_workflow(
            AgentRunWorkflow.run,
            run,
            id=run_id,
            task_queue=task_queue,
            search_attributes=(
                search_attributes.for_run(
                    # It starts at once (no admission queue): a running run, which its
                    # first step does not need to upsert.
                    run.agent,
                    run.tenant,
                    search_attributes.shown_status(RunStatus.PLANNING),
                    run.priority,
                )
                if indexed
                else None
            ),
            priority=fairness.run_priority(run.priority, run.tenant, limits.weight),
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            # What the Web UI shows above the timeline: who, for whom, what.
            static_summary=run_summaries.static_summary(run),
            static_details=run_summaries.static_details(run, run_id),
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
                f"the cluster lacks agentledger's search attributes ({err.message}): "
                f"{start_a_worker(task_queue)} (it registers them), or set "
                "AGENTLEDGER_SEARCH_ATTRIBUTES=0"
            ) from err
        raise
    return Started(run_id, existing=False)


async def require_tools(pool: AsyncConnectionPool, task_queue: str, tools: list[str]) -> None:
    """Refuse a run naming a tool the queue's workers lack, before it starts."""
    served = await tool_sets.served_tools(pool, task_queue)
    if served is None:
        raise OperationRefused(
            f"no worker has served task queue {task_queue!r} yet, so its tools are unknown: "
            f"{start_a_worker(task_queue)}, then start the run"
        )
    missing = sorted(set(tools) - set(served))
    if missing:
        raise OperationRefused(
            f"the workers on task queue {task_queue!r} have no tool {', '.join(missing)} "
            f"(they have: {', '.join(served) or 'none'}); start them with the tools the "
            "agent names, or fix its profile"
        )


async def _mirrored(pool: AsyncConnectionPool, run_id: str) -> bool:
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT 1 FROM runs WHERE run_id = %s", (run_id,))
        return await cur.fetchone() is not None
