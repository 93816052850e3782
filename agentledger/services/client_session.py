"""What every service of one `RunClient` acts through: the caller's tenant, resolved once,
and the connections, each opened on first use (`RunClient` owns and closes them)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar, cast

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from agentledger.core.access import Caller
from agentledger.core.constants import DEFAULT_WAIT_SECONDS
from agentledger.core.errors import OperationRefused
from agentledger.core.settings import Settings

Method = TypeVar("Method", bound=Callable[..., Any])
Answer = TypeVar("Answer")


def refuse_under_tenant(tenant: str | None, act: str) -> None:
    """The one rule for an act that spans tenants (their settings, builds, schema or every
    run on a task queue): an operator's, refused under a tenant's scope."""
    if tenant:
        raise OperationRefused(
            f"{act}: an operator's act, not one under AGENTLEDGER_TENANT={tenant}; run it "
            "without AGENTLEDGER_TENANT (and without --tenant)"
        )


class OnSession(Protocol):
    session: ClientSession


def operators_only(act: str) -> Callable[[Method], Method]:
    """A service method that is an operator's act: `refuse_under_tenant` before anything is
    read or changed, so nothing it would print names another tenant's run."""

    def mark(method: Method) -> Method:
        @functools.wraps(method)
        def guarded(self: OnSession, *args: Any, **kwargs: Any) -> Any:
            refuse_under_tenant(self.session.tenant, act)
            return method(self, *args, **kwargs)

        return cast(Method, guarded)

    return mark


class ClientSession:
    """One caller's view of the stack: its tenant (the settings' `tenant`; None: an
    operator, every tenant's), who it is (`caller`, the credential a server authenticated;
    None: the operator), how long an operation may wait for an answer (`wait`, by default
    DEFAULT_WAIT_SECONDS), the Temporal client and the Postgres pool."""

    def __init__(
        self,
        settings: Settings,
        *,
        temporal: Callable[[float | None], Awaitable[Client]],
        database: Callable[[], Awaitable[AsyncConnectionPool]],
        wait: float | None = None,
        caller: Caller | None = None,
    ) -> None:
        self.settings = settings
        self.tenant = settings.tenant
        self.caller = caller
        self.wait = DEFAULT_WAIT_SECONDS if wait is None else wait
        self._temporal = temporal
        self._database = database

    async def temporal(self, wait: float | None = None) -> Client:
        """The Temporal client, connected on first use within `wait` seconds."""
        return await self._temporal(wait)

    async def database(self) -> AsyncConnectionPool:
        """The Postgres pool, for what cannot be answered without the mirror."""
        return await self._database()

    async def mirror(self) -> AsyncConnectionPool | None:
        """The pool when a database is configured, else None (reads that can do without)."""
        return await self._database() if self.settings.database_url else None

    def bound(self, wait: float | None) -> float:
        """How long an operation may wait: `wait` if the call names one, else the
        session's."""
        return self.wait if wait is None else wait

    async def act(
        self,
        operation: Callable[..., Awaitable[Answer]],
        *args: Any,
        wait: float | None,
        **options: Any,
    ) -> Answer:
        """`operation` (agentledger/ops's, on one run or backlog: Temporal's client first, then
        `args`) for this caller: within `bound(wait)`, with the caller's tenant and
        mirror."""
        wait = self.bound(wait)
        return await operation(
            await self.temporal(wait),
            *args,
            wait=wait,
            tenant=self.tenant,
            mirror=await self.mirror(),
            **options,
        )

    def who(self, tenant: str) -> Caller:
        """Who acts, for `tenant`: the authenticated caller, else the operator."""
        return self.caller or Caller.operator(tenant)

    def scope(self, tenant: str | None) -> str | None:
        """The tenant a command acts in: `tenant`, or the caller's (AGENTLEDGER_TENANT), which
        `tenant` may repeat but never widen."""
        if tenant and self.tenant and tenant != self.tenant:
            raise OperationRefused(
                f"this client acts for tenant {self.tenant!r} (AGENTLEDGER_TENANT), not {tenant!r}"
            )
        return tenant or self.tenant
