"""The one door every run comes in by: the tenant's policy, read here, never passed in.

Every path that starts a run (the CLI's `start`, `client.runs.start`, a fork, `demo`, a
capped tenant's queue) calls `start`. It reads the tenant's policy from Postgres itself:
the operator's rules for its runs (agents, free-form specs, approval rules), its registered
approvers (a spec may add approvers, never remove the tenant's), its cap, its weight, its
model-call rate, the priorities it may take (a start at another is refused), and resolves
the run under it with `agentledger.core.tenant_policy.resolve`, the one function every start
uses, for the caller its credential proved. No caller hands it limits, rules or approvers,
so a caller with stale or chosen ones changes nothing; without a database there is no policy
to read, and the start is refused. An idempotency key names one request: the same key with
another request is refused, naming the run the first one started.
`tests/test_door.py` fails if any other module starts a run. Runs a workflow starts as its
children (a backlog's tasks, `run_agent`) read the same policy through an activity just
before they start, and a sub-agent's run takes its parent's (agentledger/workflows/run_starts.py,
the one way a workflow starts a run).

Run ids are scoped by tenant (`run_id`): the same key in two tenants names two runs. The
engine's own runs take ids no direct start can: forks under `run-~`, backlog runs
`run-AGENT.KEY.N` (a direct start's key of that shape is scoped instead).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Literal

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from agentledger.core import constants as names
from agentledger.core._state import RunInput
from agentledger.core.backlog_models import QueuedTask, TaskItem
from agentledger.core.errors import IdempotencyConflict, OperationRefused, SetupError
from agentledger.core.identity import Identity
from agentledger.core.keys import canonical_json, id_part
from agentledger.core.results import ForkOrigin
from agentledger.core.spec import JsonDict, RunSpec
from agentledger.core.tenant_policy import RunPolicy, resolve
from agentledger.ops import operations
from agentledger.store import mirror_views
from agentledger.store.run_requests import RunRequestStore
from agentledger.store.tenant_store import TenantStore

# The tenant of single-user deployments: its runs keep the ids they always had.
DEFAULT_TENANT = "default"
# Ids no direct start can take: `id_part` never yields "~", and a tenant's part is never empty.
ENGINE_ID_PREFIX = names.RUN_ID_PREFIX + "~"

Origin = Literal["start", "fork"]
# What a backlog names its runs after `run-` (agentledger/core/backlog_models.py, `child_run_id`):
# agent (no dot), key (no dot), launch.
BACKLOG_RUN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}\.[A-Za-z0-9_-]+\.[0-9]+")

NO_DATABASE = (
    "refused: a run's policy (its tenant's approvers, cap, weight and priorities) lives in "
    "Postgres, and no database is configured; set DATABASE_URL (`agentledger up` prints it)"
)


async def policy(pool: AsyncConnectionPool, tenant: str) -> RunPolicy:
    """The tenant's policy as Postgres holds it now."""
    return await TenantStore(pool).policy(tenant)


def allowed(spec: RunSpec, found: RunPolicy) -> None:
    """Refuse a run at a priority its tenant may not take."""
    refusal = found.limits.priority_refusal(spec.priority)
    if refusal is not None:
        raise OperationRefused(refusal)


def run_id(tenant: str, key: str | None, *, origin: Origin = "start") -> str:
    """The workflow id for a tenant's idempotency key: the same key in two tenants names two
    runs. The default tenant's direct starts keep `run-<key>` (the ids runs had before ids
    were scoped), except a key shaped like a backlog run's name (`AGENT.KEY.N`), which would
    take that run's id first; those, and another tenant's, are `run-<tenant>~<key>`; a fork's
    `run-~fork.<tenant>~<key>`. Neither part can hold "~", so no two (tenant, key, origin)
    share an id, and none is a backlog run's."""
    if key is None:
        return operations.run_id_for(None)
    own = id_part(key)
    keeps = tenant == DEFAULT_TENANT and not BACKLOG_RUN.fullmatch(own)
    scoped = own if keeps else f"{id_part(tenant)}~{own}"
    if origin == "fork":
        return f"{ENGINE_ID_PREFIX}fork.{id_part(tenant)}~{id_part(key)}"
    return names.RUN_ID_PREFIX + scoped


def request_fingerprint(spec: RunSpec, fork: ForkOrigin | None) -> str:
    """What an idempotency key names: the request as the caller made it (its spec but the
    key, and a fork's origin), before the policy made a run of it."""
    asked = {
        "spec": spec.model_dump(mode="json", exclude={"idempotency_key"}),
        "fork": fork.model_dump(mode="json", exclude={"effect_scope"}) if fork else None,
    }
    return hashlib.sha256(canonical_json(asked).encode()).hexdigest()


async def start(
    client: Client,
    pool: AsyncConnectionPool | None,
    spec: RunSpec,
    *,
    task_queue: str,
    acting_tenant: str | None,
    requester: Identity,
    roles: frozenset[str] | None,
    profiles: Mapping[str, JsonDict],
    indexed: bool = True,
    fork: ForkOrigin | None = None,
    wait: float | None = None,
) -> operations.Started:
    """Start a run under its tenant's policy, read from `pool`; the same key (in the same
    tenant) always names the same run, and another request under it is refused.
    `acting_tenant`: the tenant the caller acts for (AGENTLEDGER_TENANT, a credential's),
    None for an operator; a run of another tenant is refused. `requester` and `roles`: who
    asks, as their credential proved it (`roles` None: a spec that is not the caller's own,
    as a fork's), and `profiles` the operator's agents (`resolve` says what each does).
    With `fork`, the run is a fork from that origin (agentledger/ops/fork_ops.py)."""
    if pool is None:
        raise SetupError(NO_DATABASE)
    if isinstance(spec, RunInput):  # what the engine sets is the engine's to set
        spec = spec.spec()
    if acting_tenant is not None and spec.tenant != acting_tenant:
        raise OperationRefused(
            f"this client acts for tenant {acting_tenant!r} and cannot start a run for "
            f"{spec.tenant!r}"
        )
    found = await policy(pool, spec.tenant)
    allowed(spec, found)
    run = resolve(spec, found, requester=requester, roles=roles, profiles=profiles, fork=fork)
    scoped = run_id(spec.tenant, spec.idempotency_key, origin="start" if fork is None else "fork")
    legacy = operations.run_id_for(spec.idempotency_key)
    key = spec.idempotency_key
    if key is not None and legacy != scoped and not BACKLOG_RUN.fullmatch(id_part(key)):
        # A run this tenant started with the key before ids were scoped is still that run
        # (a key shaped like a backlog run's name may name the backlog's run: never).
        if await mirror_views.run_tenant(pool, legacy) == spec.tenant:
            return operations.Started(legacy, existing=True)
    requests = RunRequestStore(pool)
    claimed = False
    if key is not None:
        asked = request_fingerprint(spec, fork)
        first = await requests.claim(scoped, spec.tenant, asked)
        if first is not None and first != asked:
            raise IdempotencyConflict(
                f"idempotency key {key!r} already started run {scoped} from a different "
                "request; send that request again for that run, or use a new key",
                scoped,
            )
        claimed = first is None
    try:
        return await operations.start_run(
            client,
            run,
            task_queue=task_queue,
            indexed=indexed,
            limits=found.limits,
            mirror=pool,
            run_id=scoped,
            wait=wait,
        )
    except OperationRefused:
        if claimed:  # nothing started: the key names no request yet
            await requests.release(scoped)
        raise


async def backlog_tasks(
    pool: AsyncConnectionPool | None,
    tasks: list[TaskItem],
    *,
    acting_tenant: str | None,
    requester: Identity,
    roles: frozenset[str] | None,
    profiles: Mapping[str, JsonDict],
) -> list[QueuedTask]:
    """A backlog's tasks as its runs will start: each of the caller's tenant (a task of
    another is refused), resolved under its tenant's policy for the caller (`resolve`, as a
    start is: a task's own spec is held to its agent's profile, or is a free-form spec only
    the tenant's policy may allow). The backlog workflow starts them as its children; what
    it starts is what passed here."""
    if pool is None:
        raise SetupError(NO_DATABASE)
    ready: list[QueuedTask] = []
    policies: dict[str, RunPolicy] = {}
    for task in tasks:
        spec = task.spec
        if acting_tenant is not None:
            if "tenant" not in spec.model_fields_set:
                spec = spec.model_copy(update={"tenant": acting_tenant})
            elif spec.tenant != acting_tenant:
                raise OperationRefused(
                    f"this client acts for tenant {acting_tenant!r} and cannot enqueue task "
                    f"{task.idempotency_key!r} for {spec.tenant!r}"
                )
        if spec.tenant not in policies:
            policies[spec.tenant] = await policy(pool, spec.tenant)
        # A capped tenant's task waits in its queue when the backlog starts it (the
        # backlog reads the policy again then, agentledger/workflows/backlog.py).
        allowed(spec, policies[spec.tenant])
        run = resolve(
            spec, policies[spec.tenant], requester=requester, roles=roles, profiles=profiles
        )
        ready.append(QueuedTask.model_validate({**dict(task), "spec": run}))
    return ready
