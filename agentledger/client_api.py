"""`agentledger.RunClient`: the one front door to agentledger from Python.

Every operation the `agentledger` command offers is a method of one of its services, grouped
as the command groups them (`client.runs`, `client.sessions`, `client.backlogs`,
`client.tenants`, `client.approvers`, `client.deploys`, `client.mirror`, `client.evals`,
`client.keys`; agentledger/services), and the command is a thin layer over them
(tests/test_cli_front_door.py holds it to that). This class holds the connections
(Temporal, made on first use; Postgres, opened on first use) and the caller's tenant
(AGENTLEDGER_TENANT), which its services share through one `ClientSession`. Signatures use only
the public types `agentledger` exports.

    async with await agentledger.RunClient.connect() as client:
        started = await client.runs.start("Summarize our refund policy.")
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from agentledger.core.access import Caller
from agentledger.core.errors import InvalidRequest, OperationRefused, SetupError
from agentledger.core.plugin_config import AgentLedgerConfig
from agentledger.core.settings import Settings
from agentledger.services.approvers import Approvers
from agentledger.services.backlogs import Backlogs
from agentledger.services.client_session import ClientSession, operators_only
from agentledger.services.deploys import Deploys
from agentledger.services.evals import Evals
from agentledger.services.keys import ApiKeys
from agentledger.services.mirror import Mirror
from agentledger.services.runs import Runs
from agentledger.services.sessions import Sessions
from agentledger.services.tenants import Tenants
from agentledger.store.db import install_tool_schema, open_pool, schema_version
from agentledger.temporal.client import connect
from agentledger.temporal.encryption import speaks_pydantic
from agentledger.tools.loading import DEMO_TOOLS, load_registry, split_references


class RunClient:
    """Connections to Temporal and Postgres for one program, acting for one tenant (the
    settings' `tenant`, else any). Use it as `async with`, or call `close()` when done."""

    def __init__(
        self,
        client: Client | None,
        settings: Settings,
        *,
        wait: float | None = None,
        began: float | None = None,
        caller: Caller | None = None,
    ) -> None:
        self._client = client
        self.settings = settings
        # How long connecting may take (None: as long as it takes), and how long an operation
        # waits for an answer unless it names its own `wait` (None: DEFAULT_WAIT_SECONDS).
        self._wait = wait
        # A command (`began`: its start, by `time.monotonic()`) connects to Temporal and to
        # Postgres within one bound, so that together they answer within it; a long-lived
        # client gives each connection `wait` of its own.
        self._set_up_ends_at = None if wait is None or began is None else began + wait
        self._pool: AsyncConnectionPool | None = None
        self._shared: RunClient | None = None  # a tenant's view uses its operator's connections
        # What every service acts through: this client's tenant and connections, resolved once.
        self.session = session = ClientSession(
            settings, temporal=self.temporal, database=self._database, wait=wait, caller=caller
        )
        self.runs = Runs(session)
        self.sessions = Sessions(session)
        self.backlogs = Backlogs(session)
        self.tenants = Tenants(session)
        self.approvers = Approvers(session)
        self.deploys = Deploys(session)
        self.mirror = Mirror(session)
        self.evals = Evals(session)
        self.keys = ApiKeys(session)

    @classmethod
    async def connect(cls, settings: Settings | None = None) -> Self:
        """Connect to the stack the settings (by default the environment) name: a Client
        with `AgentLedgerPlugin`, as your own app would connect one (`RunClient.on`)."""
        from agentledger.worker.plugin import (
            AgentLedgerPlugin,
        )  # the worker's, only when connecting

        settings = settings or Settings.load()
        config = AgentLedgerConfig.from_settings(settings)
        return cls.on(await connect(settings, plugins=[AgentLedgerPlugin(config)]), config)

    @classmethod
    def on(cls, client: Client, config: AgentLedgerConfig) -> Self:
        """Operations over your own Client, connected with `AgentLedgerPlugin(config)`."""
        if not speaks_pydantic(client.data_converter):
            raise SetupError(
                "this Client was not connected with AgentLedgerPlugin: pass "
                "plugins=[AgentLedgerPlugin(config)] to Client.connect"
            )
        return cls(client, config.settings())

    @classmethod
    def lazy(
        cls,
        settings: Settings | None = None,
        *,
        wait: float | None = None,
        began: float | None = None,
    ) -> Self:
        """A client that connects to Temporal only when an operation needs it, so reads of
        the mirror work while Temporal is down. Each connection is set up within `wait`
        seconds, and all of them within `wait` of `began` if given; an operation waits
        `wait` for its answer unless it names its own."""
        return cls(None, settings or Settings.load(), wait=wait, began=began)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.close()

    def acting_for(self, tenant: str, *, caller: Caller | None = None) -> RunClient:
        """This client's connections, acting for `tenant` alone, as `caller` (the credential
        a server authenticated; None: this client's own operator): how a server serves each
        caller in the tenant its credential names. A tenant's client cannot widen to
        another; the view needs no `close()` (its connections are this client's)."""
        if not tenant:
            raise InvalidRequest("a view acts for a named tenant")
        if self.tenant is not None and tenant != self.tenant:
            raise OperationRefused(
                f"this client acts for tenant {self.tenant!r} (AGENTLEDGER_TENANT), not {tenant!r}"
            )
        if caller is not None and caller.tenant != tenant:
            raise OperationRefused(f"a caller of tenant {caller.tenant!r} acts for no other")
        view = type(self)(
            self._client,
            self.settings.model_copy(update={"tenant": tenant}),
            wait=self._wait,
            caller=caller,
        )
        view._shared = self._shared or self
        return view

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    @property
    def tenant(self) -> str | None:
        """The only tenant whose runs this client sees (None: every tenant's)."""
        return self.settings.tenant

    @operators_only("migrate changes the schema every tenant's runs live in")
    async def migrate(self) -> int:
        """Bring the database's schema up to this code's version, and create the tables of
        the tools AGENTLEDGER_TOOLS names (the demo's by default); returns the version. The
        deploy step for a role with DDL rights: workers whose role has none start on what
        it made."""
        registry = load_registry(split_references(self.settings.tools) or [DEMO_TOOLS])
        pool = await open_pool(
            self.settings.require_database(),
            max_size=1,
            connect_seconds=self._wait or 5,
            connect_ends_at=self._set_up_ends_at,
            migrate=True,
            prepared_statements=self.settings.prepared_statements,
        )
        try:
            await install_tool_schema(pool, registry.schema())
            async with pool.connection() as conn:
                return await schema_version(conn)
        finally:
            await pool.close()

    # ------------------------------------------------------------ connections

    async def temporal(self, wait: float | None = None) -> Client:
        """The Temporal client, connected on first use (within `wait` seconds, and what is
        left of this client's bound)."""
        if self._shared is not None:
            return await self._shared.temporal(wait)
        if self._client is None:
            self._client = await connect(
                self.settings, within_seconds=wait or self._wait, ends_at=self._set_up_ends_at
            )
        return self._client

    @property
    def client(self) -> Client:
        """The Temporal client this RunClient was made with."""
        if self._client is None:
            raise RuntimeError("not connected yet: use `await client.temporal()`")
        return self._client

    async def _database(self) -> AsyncConnectionPool:
        """The Postgres pool, opened on first use and kept until `close()`; it never
        migrates (`migrate()` does)."""
        if self._shared is not None:
            return await self._shared._database()
        if self._pool is None:
            database = self.settings.require_database()
            self._pool = await open_pool(
                database,
                max_size=2,
                connect_seconds=self._wait or 5,
                connect_ends_at=self._set_up_ends_at,
                migrate=False,
                prepared_statements=self.settings.prepared_statements,
                statement_seconds=self._wait,
            )
            if self._wait is not None:  # nor may waiting for a connection outlast it
                self._pool.timeout = self._wait
        return self._pool
