"""One caller's view of the stack, and the rules of tenancy, written once.

A `Scope` is made once per command or request: who calls (a `Caller`: the operator, who
sees every tenant, or one tenant's caller), how long an operation may wait for an answer,
and the connections (Temporal, Postgres), each opened on first use by whoever owns them
(`RunClient`). Every client class (`Runs`, `Backlogs`, ...) is built on one.

Everything that compares a tenant with another, or decides which tenant a thing is, lives
here and nowhere else on the client side (a test holds it to that):
another tenant's run reads exactly as a missing one (`no_run`, `find_run`), a caller's scope
narrows but never widens (`narrowed`), an operator's act is refused under a tenant
(`refuse_unless_operator`), a run or a backlog task starts in the caller's tenant or not at
all (`spec_for`), and run ids are scoped by tenant (`run_id`).
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, Literal, Protocol, TypeVar, cast

from psycopg_pool import AsyncConnectionPool
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowHandle,
)
from temporalio.service import RPCError, RPCStatusCode

from agentledger.client.in_flight import in_flight
from agentledger.core import backlog_models, bounds, identity, search_attributes
from agentledger.core import constants as names
from agentledger.core.access import ROLES, Caller
from agentledger.core.backlog_models import TaskItem
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.constants import DEFAULT_WAIT_SECONDS
from agentledger.core.errors import (
    InvalidRequest,
    NotAnswered,
    OperationError,
    OperationRefused,
    RunNotFound,
    SetupError,
)
from agentledger.core.keys import id_part
from agentledger.core.results import RunState
from agentledger.core.run_reports import ActivityInFlight
from agentledger.core.spec import RunSpec
from agentledger.store import mirror_views
from agentledger.store.backlog_store import BacklogStore
from agentledger.temporal.worker_presence import Deadline, NoAnswer, within
from agentledger.workflows import AgentRunWorkflow

Method = TypeVar("Method", bound=Callable[..., Any])

# The caller of a command run without a tenant: the operator, who sees every tenant's runs.
OPERATOR = Caller(
    tenant=None, roles=frozenset(ROLES), identity=identity.OPERATOR, credential="operator"
)


def tenant_caller(tenant: str) -> Caller:
    """The caller a program acting for `tenant` alone is (AGENTLEDGER_TENANT, `--tenant`,
    `RunClient.acting_for`): every role, within that tenant."""
    if not tenant:
        raise InvalidRequest("a view acts for a named tenant")
    bounds.check_text("tenant", tenant)
    return Caller(
        tenant=tenant,
        roles=frozenset(ROLES),
        # The operator's connections, narrowed: no credential proves anyone in particular.
        identity=identity.OPERATOR,
        credential=f"tenant:{tenant}",
    )


def tenant_name(tenant: str) -> str:
    """`tenant`, if it is a tenant name: one that stands unchanged in its runs' ids, so no
    two tenants' ids meet (`a/b` would be written `a-b-<hash>`, another tenant's name)."""
    if not tenant or id_part(tenant) != tenant or len(tenant) > bounds.NAME_CHARS:
        raise InvalidRequest(
            f"tenant {tenant[: bounds.NAME_CHARS]!r} is not a tenant name: 1 to "
            f"{bounds.NAME_CHARS} letters, digits, '.', '-' and '_'"
        )
    return tenant


def refuse_requested_tenant(named: str | None) -> None:
    """The tenant is the credential's: a request that names one (a protocol's own `tenant`
    field, say) is refused rather than read."""
    if named:
        raise InvalidRequest("the tenant is your credential's; send no 'tenant'")


def caller_of(config: AgentLedgerConfig) -> Caller:
    """The caller a program's config makes it: a tenant's (AGENTLEDGER_TENANT), else the
    operator."""
    return tenant_caller(config.tenant) if config.tenant else OPERATOR


class Connections(Protocol):
    """Where a scope's connections come from: whoever owns them (a `RunClient`) opens each
    on first use and closes it."""

    async def temporal(self, wait: float | None = None) -> Client: ...

    async def database(self) -> AsyncConnectionPool: ...

    def has_database(self) -> bool: ...


@dataclass(frozen=True)
class Held:
    """Connections a program already holds (its own Client, its own pool), used as they are."""

    client: Client
    pool: AsyncConnectionPool | None = None

    async def temporal(self, wait: float | None = None) -> Client:
        return self.client

    async def database(self) -> AsyncConnectionPool:
        if self.pool is None:
            raise SetupError(NO_DATABASE)
        return self.pool

    def has_database(self) -> bool:
        return self.pool is not None


NO_DATABASE = (
    "refused: a run's policy (its tenant's approvers, cap, weight and priorities) lives in "
    "Postgres, and no database is configured; set DATABASE_URL (`agentledger up` prints it)"
)


# ---------------------------------------------------------------- run ids, scoped by tenant

# The tenant of single-user deployments: its runs keep the ids they always had.
DEFAULT_TENANT = "default"
# Ids no direct start can take: `id_part` never yields "~", and a tenant's part is never empty.
ENGINE_ID_PREFIX = names.RUN_ID_PREFIX + "~"
# What a backlog names its runs after `run-` (agentledger.core.backlog_models,
# `child_run_id`): agent (no dot), key (no dot), launch.
BACKLOG_RUN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}\.[A-Za-z0-9_-]+\.[0-9]+")

Origin = Literal["start", "fork"]


def run_id_for(key: str | None) -> str:
    """The unscoped workflow id for an idempotency key, as runs had before ids were scoped:
    readable, and distinct for distinct keys; a fresh one without a key."""
    if key is None:
        return names.RUN_ID_PREFIX + uuid.uuid4().hex[:12]
    return names.RUN_ID_PREFIX + id_part(key)


def run_id(tenant: str, key: str | None, *, origin: Origin = "start") -> str:
    """The workflow id for a tenant's idempotency key: the same key in two tenants names two
    runs. The default tenant's direct starts keep `run-<key>` (the ids runs had before ids
    were scoped), except a key shaped like a backlog run's name (`AGENT.KEY.N`), which would
    take that run's id first; those, and another tenant's, are `run-<tenant>~<key>`; a fork's
    `run-~fork.<tenant>~<key>`. Neither part can hold "~", so no two (tenant, key, origin)
    share an id, and none is a backlog run's."""
    if key is None:
        return run_id_for(None)
    own = id_part(key)
    keeps = tenant == DEFAULT_TENANT and not BACKLOG_RUN.fullmatch(own)
    scoped = own if keeps else f"{id_part(tenant)}~{own}"
    if origin == "fork":
        return f"{ENGINE_ID_PREFIX}fork.{id_part(tenant)}~{id_part(key)}"
    return names.RUN_ID_PREFIX + scoped


async def started_unscoped(
    pool: AsyncConnectionPool, spec: RunSpec, *, origin: Origin = "start"
) -> str | None:
    """The id of a run the spec's tenant started with its key before ids were scoped: still
    that run (a key shaped like a backlog run's name may name the backlog's run: never)."""
    key = spec.idempotency_key
    if key is None or BACKLOG_RUN.fullmatch(id_part(key)):
        return None
    legacy = run_id_for(key)
    if legacy == run_id(spec.tenant, key, origin=origin):
        return None
    return legacy if await mirror_views.run_tenant(pool, legacy) == spec.tenant else None


# ---------------------------------------------------------------- what every read finds


def no_run(run_id: str) -> RunNotFound:
    """The one refusal for a run the caller may not see: a missing run and another tenant's
    read alike, word for word and exit code (3), so run ids cannot be probed."""
    return RunNotFound(f"no run {run_id!r}: `agentledger list` shows the runs")


def no_backlog(agent: str) -> RunNotFound:
    """What a command that goes through Temporal says of a backlog that is not there, or
    (under a tenant) that holds none of the tenant's tasks."""
    return RunNotFound(
        f"agent {agent} has no backlog: `backlog enqueue --agent {agent} FILE` creates it"
    )


def no_task(agent: str, key: str) -> OperationError:
    """A retry of a key the backlog does not hold, or (under a tenant) of another tenant's
    task: word for word the refusal of the backlog's retry validator
    (agentledger.workflows.backlog), as a backlog's change passes it on."""
    return OperationError(f"refused: {backlog_models.no_task(agent, key)}")


@dataclass
class RunRef:
    """A run the server knows, with what it says of it without asking a worker."""

    handle: WorkflowHandle[Any, Any]
    running: bool
    task_queue: str
    indexed_status: str | None
    in_flight: list[ActivityInFlight] = field(default_factory=list)


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


# ---------------------------------------------------------------- the scope


@dataclass(frozen=True)
class Scope:
    """One caller's view: who (`caller`; its tenant None for the operator), how long an
    operation may wait for an answer unless it names its own (`wait`), the config (task
    queue, links, limits) and the connections."""

    caller: Caller
    config: AgentLedgerConfig
    connections: Connections
    wait: float = DEFAULT_WAIT_SECONDS

    @classmethod
    def over(
        cls,
        client: Client,
        pool: AsyncConnectionPool | None = None,
        *,
        config: AgentLedgerConfig | None = None,
        tenant: str | None = None,
        wait: float | None = None,
    ) -> Scope:
        """A scope on connections a program holds already (a test's, an app's): the
        operator's, or `tenant`'s alone."""
        return cls(
            caller=tenant_caller(tenant) if tenant else OPERATOR,
            config=config or AgentLedgerConfig.model_construct(),
            connections=Held(client, pool),
            wait=DEFAULT_WAIT_SECONDS if wait is None else wait,
        )

    # ------------------------------------------------------------ connections and bounds

    @property
    def tenant(self) -> str | None:
        """The only tenant whose runs this caller sees (None: the operator, every tenant's)."""
        return self.caller.tenant

    @property
    def home_tenant(self) -> str:
        """The tenant what the caller makes belongs to: its own, or the default tenant for
        the operator."""
        return self.caller.tenant or DEFAULT_TENANT

    @property
    def tenant_in_advice(self) -> str:
        """The tenant a command this caller is advised to run names: its own, or a
        placeholder for the operator, who picks one."""
        return self.caller.tenant or "TENANT"

    @property
    def operator(self) -> bool:
        """Whether the caller is the operator, who sees and acts for every tenant."""
        return self.caller.tenant is None

    def bound(self, wait: float | None) -> float:
        """How long an operation may wait: `wait` if the call names one, else the scope's."""
        return self.wait if wait is None else wait

    async def temporal(self, wait: float | None = None) -> Client:
        """The Temporal client, connected on first use within `wait` seconds."""
        return await self.connections.temporal(wait)

    async def database(self) -> AsyncConnectionPool:
        """The Postgres pool, for what cannot be answered without the mirror."""
        return await self.connections.database()

    async def mirror(self) -> AsyncConnectionPool | None:
        """The pool when a database is configured, else None (reads that can do without)."""
        return await self.connections.database() if self.connections.has_database() else None

    # ------------------------------------------------------------ whose scope

    def narrowed(self, tenant: str | None) -> Scope:
        """This scope acting for `tenant` alone (None: as it is): an operator's narrows to
        any tenant, a tenant's may repeat its own but never widen to another's."""
        if tenant is None or tenant == self.caller.tenant:
            return self
        if self.caller.tenant is not None:
            raise OperationRefused(
                f"this client acts for tenant {self.caller.tenant!r} (AGENTLEDGER_TENANT), "
                f"not {tenant!r}"
            )
        return replace(self, caller=tenant_caller(tenant))

    def acting_as(self, caller: Caller) -> Scope:
        """This scope's connections and bound, acting as `caller` (an authenticated caller:
        its identity, roles and tenant), which must be within this scope."""
        self.narrowed(caller.tenant)
        config = self.config.model_copy(update={"tenant": caller.tenant})
        return replace(self, caller=caller, config=config)

    def acting_in(self, tenant: str | None) -> str | None:
        """The tenant a command acts in: `tenant`, or the caller's, which `tenant` may
        repeat but never widen."""
        return self.narrowed(tenant).caller.tenant

    def refuse_unless_operator(self, act: str) -> None:
        """The one rule for an act that spans tenants (their settings, builds, schema or
        every run on a task queue): an operator's, refused under a tenant's scope."""
        if self.caller.tenant is not None:
            raise OperationRefused(
                f"{act}: an operator's act, not one under AGENTLEDGER_TENANT="
                f"{self.caller.tenant}; run it without AGENTLEDGER_TENANT (and without --tenant)"
            )

    def sees(self, owner: str | None) -> bool:
        """Whether a thing of tenant `owner` is the caller's to see."""
        return self.caller.tenant is None or owner == self.caller.tenant

    def approver_tenant(self, tenant: str | None, *, any_tenant: bool) -> str | None:
        """Whose runs a new approver decides: `tenant` or the caller's; None (every tenant's,
        `any_tenant`) for an operator alone."""
        scoped = self.acting_in(tenant)
        if any_tenant:
            if scoped is not None:
                raise OperationRefused(
                    "--any-tenant registers an approver of every tenant's runs: an operator's "
                    f"act, not one for tenant {scoped!r}; leave out --tenant and "
                    "AGENTLEDGER_TENANT"
                )
        elif scoped is None:
            raise InvalidRequest(
                "say whose runs this approver decides: --tenant NAME (or AGENTLEDGER_TENANT), "
                "or, as an operator, --any-tenant for every tenant's"
            )
        return scoped

    def run_id(self, key: str) -> str:
        """The id of the run the caller's tenant starts with idempotency key `key`."""
        return run_id(self.caller.tenant or DEFAULT_TENANT, key)

    # ------------------------------------------------------------ what the caller starts

    def spec_for(self, spec: RunSpec) -> RunSpec:
        """`spec` as the caller may start it: in the caller's tenant when it names none; one
        naming another tenant is refused."""
        tenant = self.caller.tenant
        if tenant is None:
            return spec
        if "tenant" not in spec.model_fields_set:
            return spec.model_copy(update={"tenant": tenant})
        if spec.tenant != tenant:
            raise OperationRefused(
                f"this client acts for tenant {tenant!r} and cannot start a run for {spec.tenant!r}"
            )
        return spec

    def task_for(self, task: TaskItem) -> RunSpec:
        """A backlog task's spec as the caller may enqueue it (as `spec_for`)."""
        tenant = self.caller.tenant
        spec = task.spec
        if tenant is not None and "tenant" in spec.model_fields_set and spec.tenant != tenant:
            raise OperationRefused(
                f"this client acts for tenant {tenant!r} and cannot enqueue task "
                f"{task.idempotency_key!r} for {spec.tenant!r}"
            )
        return self.spec_for(spec)

    # ------------------------------------------------------------ what the caller reads

    async def find_run(self, run_id: str, deadline: Deadline) -> RunRef:
        """The one accessor every command that reads or writes a run goes through: the run,
        if it exists and is the caller's to see; no worker needed. Another tenant's run is
        refused exactly as a missing one (`no_run`), so ids cannot be probed."""
        client = await self.temporal(deadline.left())
        handle = client.get_workflow_handle(run_id)
        try:
            description = await describe_within(handle, deadline)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                raise no_run(run_id) from err
            raise
        if description.workflow_type != names.WORKFLOW_NAME:
            raise no_run(run_id)  # a backlog, a tenant's queue, an eval: not a run
        indexed = description.typed_search_attributes
        if self.caller.tenant is not None:
            owner = indexed.get(search_attributes.TENANT)
            if owner is None:
                owner = await self._mirrored_owner(run_id)
            if owner is None:
                try:
                    state: RunState = await within(
                        deadline.share(0.5), handle.query(AgentRunWorkflow.state)
                    )
                    owner = state.tenant
                except (NoAnswer, RPCError) as err:
                    raise NotAnswered(
                        f"cannot tell which tenant run {run_id} belongs to while no worker "
                        "answers and the mirror has not seen it; try again when a worker runs"
                    ) from err
            if not self.sees(owner):
                raise no_run(run_id)
        return RunRef(
            handle=handle,
            running=description.status == WorkflowExecutionStatus.RUNNING,
            task_queue=description.task_queue,
            indexed_status=indexed.get(search_attributes.STATUS),
            in_flight=[in_flight(a) for a in description.raw_description.pending_activities],
        )

    async def running(self, run_id: str, deadline: Deadline) -> RunRef:
        """`find_run`, for an act that needs the run still open."""
        bounds.check_text("run_id", run_id)
        run = await self.find_run(run_id, deadline)
        if not run.running:
            raise OperationRefused(
                f"run {run_id} has already ended; `agentledger receipt {run_id}` shows how"
            )
        return run

    async def check_visible(self, run_id: str, wait: float | None = None) -> None:
        """Refuse, as a missing run, a run of another tenant (an operator sees every run):
        the mirror's row says whose it is, else Temporal's (a run Temporal has forgotten is
        read from the mirror alone)."""
        if self.caller.tenant is None:
            return
        owner = await self._mirrored_owner(run_id)
        if owner is None:
            await self.find_run(run_id, Deadline(self.bound(wait)))
        elif not self.sees(owner):
            raise no_run(run_id)

    async def tenant_of_run(self, run_id: str) -> str:
        """The run's tenant, if the caller may see the run (else `no_run`, as for a run that
        does not exist): the caller's own, or, for the operator, the mirror's (a run it has
        not seen yet is the default tenant's)."""
        await self.find_run(run_id, Deadline(self.wait))
        if self.caller.tenant is not None:
            return self.caller.tenant
        return await self._mirrored_owner(run_id) or DEFAULT_TENANT

    async def _mirrored_owner(self, run_id: str) -> str | None:
        pool = await self.mirror()
        return await mirror_views.run_tenant(pool, run_id) if pool is not None else None

    def visibility_filter(self) -> str | None:
        """The clause a Temporal list query adds to see the caller's runs alone ("" for the
        operator); None when no query can name the tenant exactly (its runs show once
        mirrored)."""
        tenant = self.caller.tenant
        if tenant is None:
            return ""
        if "'" in tenant or "\\" in tenant:
            return None
        return f" AND {search_attributes.TENANT.name} = '{tenant}'"

    async def check_backlog(self, agent: str, key: str | None = None) -> None:
        """Apply the caller's tenant to a backlog command that goes through Temporal. A
        backlog holds tasks of several tenants; under a tenant, one with none of its tasks
        reads as a missing backlog, and another tenant's task as a missing task (`key`); a
        stop or resume acts on the caller's tasks alone (the backlog applies that). The
        tenants are the mirror's (a task whose spec is not mirrored yet is nobody's); an
        operator passes, with or without a database."""
        if self.caller.tenant is None:
            return
        pool = await self.mirror()
        if pool is None:
            raise SetupError(
                "refused: a backlog's tasks and their tenants live in Postgres, and no database "
                "is configured; set DATABASE_URL (`agentledger up` prints it)"
            )
        owners = await BacklogStore(pool).task_tenants(agent)
        own = {k for k, owner in owners.items() if self.sees(owner)}
        if not own:
            raise no_backlog(agent)
        if key is not None and key not in own:
            raise no_task(agent, key)


def operators_only(act: str) -> Callable[[Method], Method]:
    """A client method that is an operator's act: `refuse_unless_operator` before anything
    is read or changed, so nothing it would print names another tenant's run."""

    def mark(method: Method) -> Method:
        @functools.wraps(method)
        def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
            scope: Scope = self.scope
            scope.refuse_unless_operator(act)
            return method(self, *args, **kwargs)

        return cast(Method, guarded)

    return mark
