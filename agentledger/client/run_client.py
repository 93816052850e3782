"""`agentledger.RunClient`: agentledger from Python, every operation the `agentledger` command
offers.

RunClient holds the connections (Temporal, made on first use; Postgres, opened on first use)
and one `Scope` (the caller: the operator, or the tenant AGENTLEDGER_TENANT names), and
offers the client classes built on it, grouped as the command groups them (`client.runs`,
`client.sessions`, `client.backlogs`, `client.tenants`, `client.approvers`,
`client.deploys`, `client.mirror`, `client.evals`, `client.keys`, `client.tasks`,
`client.costs`, `client.schedules`, `client.hooks`). The
command and the HTTP server are thin faces over the same classes
(a test holds them to that). Signatures use only the public types `agentledger` exports.

    async with await agentledger.RunClient.connect() as client:
        started = await client.runs.start("Summarize our refund policy.")
"""

from __future__ import annotations

import asyncio
import copy
import gc
import sys
import threading
from types import TracebackType
from typing import Self

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from agentledger.client.approvers import Approvers
from agentledger.client.backlogs import Backlogs
from agentledger.client.costs import Costs
from agentledger.client.deploys import Deploys
from agentledger.client.evals import Evals
from agentledger.client.hooks import Hooks
from agentledger.client.keys import ApiKeys
from agentledger.client.mirror import Mirror
from agentledger.client.notifications import Notifications
from agentledger.client.runs import Runs
from agentledger.client.schedules import Schedules
from agentledger.client.scope import Scope, caller_of, operators_only, tenant_caller
from agentledger.client.sessions import Sessions
from agentledger.client.standing import StandingApprovals
from agentledger.client.tasks import Tasks
from agentledger.client.tenants import Tenants
from agentledger.core.access import Caller
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.constants import DEFAULT_WAIT_SECONDS
from agentledger.core.errors import SetupError
from agentledger.store.db import install_tool_schema, open_pool, schema_version
from agentledger.temporal.client import connect
from agentledger.temporal.encryption import speaks_pydantic
from agentledger.tools.loading import DEMO_TOOLS, load_registry

# How long the bridge's threads are given, at a client's close, to drop what it held; and how
# long, at most, to wait for one still inside Python (see release_native_clients).
BRIDGE_SETTLE_SECONDS = 0.05
BRIDGE_SETTLE_BOUND_SECONDS = 2.0


class _Connections:
    """The connections one RunClient (and every view of it) shares, each opened on first use
    and kept until `close()`."""

    def __init__(
        self,
        client: Client | None,
        config: AgentLedgerConfig,
        wait: float | None,
        began: float | None,
    ) -> None:
        self.client = client
        # A Client these connections made (`connect`, `lazy`) is theirs to close; one given to
        # `RunClient.on` stays the caller's.
        self.owns_client = client is None
        self.pool: AsyncConnectionPool | None = None
        self.config = config
        # How long connecting may take (None: as long as it takes).
        self.wait = wait
        # A command (`began`: its start, by `time.monotonic()`) connects to Temporal and to
        # Postgres within one bound, so that together they answer within it; a long-lived
        # client gives each connection `wait` of its own.
        self.set_up_ends_at = None if wait is None or began is None else began + wait

    async def temporal(self, wait: float | None = None) -> Client:
        if self.client is None:
            self.client = await connect(
                self.config, within_seconds=wait or self.wait, ends_at=self.set_up_ends_at
            )
        return self.client

    def has_database(self) -> bool:
        return bool(self.config.database_url)

    async def database(self) -> AsyncConnectionPool:
        """The Postgres pool; it never migrates (`RunClient.migrate()` does)."""
        if self.pool is None:
            self.pool = await open_pool(
                self.config.require_database(),
                max_size=2,
                connect_seconds=self.wait or 5,
                connect_ends_at=self.set_up_ends_at,
                migrate=False,
                prepared_statements=self.config.prepared_statements,
                statement_seconds=self.wait,
            )
            if self.wait is not None:  # nor may waiting for a connection outlast it
                self.pool.timeout = self.wait
        return self.pool

    async def close(self) -> None:
        """The pool, and the Temporal connection made here, released while the interpreter
        still runs, so a short script ends cleanly: a native client left to the interpreter's
        shutdown can abort the process there (temporalio/sdk-python#300)."""
        if self.pool is not None:
            await self.pool.close()
            self.pool = None
        if self.client is not None and self.owns_client:
            self.client = None
            await release_native_clients()


async def release_native_clients() -> None:
    """Free Temporal clients no longer referenced, now: their native halves drop on this
    thread, and the bridge's threads finish what the drop hands them, before the interpreter
    finalizes (a bridge thread that takes the GIL then aborts the process).

    A bridge thread that completes a call's future is still inside Python, the GIL let go
    while it wakes the event loop, after the caller has its answer; on a loaded machine it
    can stay there long after any fixed pause. The interpreter's shutdown would delete its
    thread state under it, so the wait lasts until no such thread is left in Python."""
    gc.collect()
    await asyncio.sleep(BRIDGE_SETTLE_SECONDS)
    pause = BRIDGE_SETTLE_SECONDS / 10
    for _ in range(round(BRIDGE_SETTLE_BOUND_SECONDS / pause)):  # a native thread: polled
        if not _foreign_threads_in_python():
            return
        await asyncio.sleep(pause)


def _foreign_threads_in_python() -> bool:
    """Whether a thread Python did not start (a native runtime's) is running Python code."""
    ours = {each.ident for each in threading.enumerate()}
    return any(ident not in ours for ident in sys._current_frames())


class RunClient:
    """Connections to Temporal and Postgres for one program, acting for one caller (the
    config's `tenant`, else the operator, who sees every tenant). Use it as `async with`,
    or call `close()` when done."""

    def __init__(
        self,
        client: Client | None,
        config: AgentLedgerConfig,
        *,
        wait: float | None = None,
        began: float | None = None,
    ) -> None:
        self.config = config
        self._connections = _Connections(client, config, wait, began)
        # An operation waits this long for its answer unless it names its own.
        bound = DEFAULT_WAIT_SECONDS if wait is None else wait
        self._serve(Scope(caller_of(config), config, self._connections, bound))

    def _serve(self, scope: Scope) -> None:
        """Build every client class on `scope`: what each of this client's calls acts as."""
        self.scope = scope
        self.runs = Runs(scope)
        self.sessions = Sessions(scope)
        self.backlogs = Backlogs(scope)
        self.tenants = Tenants(scope)
        self.approvers = Approvers(scope)
        self.deploys = Deploys(scope)
        self.mirror = Mirror(scope)
        self.evals = Evals(scope)
        self.keys = ApiKeys(scope)
        self.tasks = Tasks(scope)
        self.costs = Costs(scope)
        self.schedules = Schedules(scope)
        self.hooks = Hooks(scope)
        self.standing = StandingApprovals(scope)
        self.notifications = Notifications(scope)

    @classmethod
    async def connect(cls, config: AgentLedgerConfig | None = None) -> Self:
        """Connect to the stack the config (by default the environment's) names, with the
        converter and codec `AgentLedgerPlugin` puts on your own app's Client (over such a
        Client of your own: `RunClient.on`)."""
        config = config or AgentLedgerConfig.load()
        made = cls(await connect(config), config)
        made._connections.owns_client = True  # closed with it
        return made

    @classmethod
    def on(cls, client: Client, config: AgentLedgerConfig) -> Self:
        """Operations over your own Client, connected with `AgentLedgerPlugin(config)`."""
        if not speaks_pydantic(client.data_converter):
            raise SetupError(
                "this Client was not connected with AgentLedgerPlugin: pass "
                "plugins=[AgentLedgerPlugin(config)] to Client.connect"
            )
        return cls(client, config)

    @classmethod
    def lazy(
        cls,
        config: AgentLedgerConfig | None = None,
        *,
        wait: float | None = None,
        began: float | None = None,
    ) -> Self:
        """A client that connects to Temporal only when an operation needs it, so reads of
        the mirror work while Temporal is down. Each connection is set up within `wait`
        seconds, and all of them within `wait` of `began` if given; an operation waits
        `wait` for its answer unless it names its own."""
        return cls(None, config or AgentLedgerConfig.load(), wait=wait, began=began)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.close()

    def acting_for(self, tenant: str) -> RunClient:
        """This client's connections, acting for `tenant` alone: how a program serves each
        caller in the tenant its credential names. A tenant's client cannot widen to
        another; the view needs no `close()` (its connections are this client's)."""
        return self.acting_as(tenant_caller(tenant))

    def acting_as(self, caller: Caller) -> RunClient:
        """This client's connections, acting as `caller` (an authenticated caller of the HTTP
        server, say: its identity, roles and tenant), within this client's own scope."""
        scope = self.scope.acting_as(caller)  # a tenant's client never widens
        view = copy.copy(self)
        view.config = scope.config
        view._serve(scope)
        return view

    async def close(self) -> None:
        """Close the Postgres pool and the Temporal connection this client made (not a Client
        given to `on`): `async with` does it on leaving."""
        await self._connections.close()

    @property
    def tenant(self) -> str | None:
        """The only tenant whose runs this client sees (None: every tenant's)."""
        return self.scope.tenant

    @operators_only("migrate changes the schema every tenant's runs live in")
    async def migrate(self) -> int:
        """Bring the database's schema up to this code's version, and create the tables of
        the tools AGENTLEDGER_TOOLS names (the demo's by default); returns the version. The
        deploy step for a role with DDL rights: workers whose role has none start on what
        it made."""
        registry = load_registry(list(self.config.tools) or [DEMO_TOOLS])
        connections = self._connections
        pool = await open_pool(
            self.config.require_database(),
            max_size=1,
            connect_seconds=connections.wait or 5,
            connect_ends_at=connections.set_up_ends_at,
            migrate=True,
            prepared_statements=self.config.prepared_statements,
        )
        try:
            await install_tool_schema(pool, registry.schema())
            async with pool.connection() as conn:
                return await schema_version(conn)
        finally:
            await pool.close()

    async def temporal(self, wait: float | None = None) -> Client:
        """The Temporal client, connected on first use (within `wait` seconds, and what is
        left of this client's bound)."""
        return await self._connections.temporal(wait)

    @property
    def client(self) -> Client:
        """The Temporal client this RunClient was made with."""
        if self._connections.client is None:
            raise RuntimeError("not connected yet: use `await client.temporal()`")
        return self._connections.client
