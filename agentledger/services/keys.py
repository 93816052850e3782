"""`client.keys`: the keys `agentledger serve` (the HTTP door) lets in, each acting for one
tenant in one role. Every one an operator's act."""

from __future__ import annotations

from datetime import timedelta

from agentledger.core.listings import ApiKeyRow, NewApiKey
from agentledger.ops import api_keys
from agentledger.services.client_session import ClientSession, operators_only


class ApiKeys:
    """The HTTP door's keys, for an operator."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session

    @operators_only("keys create gives a tenant's people a way in")
    async def create(
        self,
        tenant: str,
        role: str,
        *,
        expires_in: timedelta | None = None,
        name: str | None = None,
        approval_roles: list[str] | None = None,
    ) -> NewApiKey:
        """A key for `agentledger serve` acting for `tenant` in `role`, labelled `name`; `key` is
        in the answer this once (Postgres keeps only its hash). An approver or admin key
        decides approvals that ask for its role, or for one of `approval_roles`."""
        return await api_keys.create(
            await self.session.database(),
            tenant,
            role,
            expires_in=expires_in,
            name=name,
            approval_roles=approval_roles,
        )

    @operators_only("keys list shows every tenant's keys")
    async def listed(self) -> list[ApiKeyRow]:
        return await api_keys.listed(await self.session.database())

    @operators_only("keys revoke closes a tenant's way in")
    async def revoke(self, key_id: str) -> ApiKeyRow:
        return await api_keys.revoke(await self.session.database(), key_id)

    @operators_only("checking a key reads every tenant's keys")
    async def verify(self, key: str) -> ApiKeyRow | None:
        """The live key's tenant, role and id, or None for any key that does not open."""
        return await api_keys.verify(await self.session.database(), key)
