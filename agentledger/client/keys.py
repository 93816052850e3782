"""`client.keys`: the API keys the HTTP server (`agentledger serve`) lets in, each acting for
one tenant in one role: made, listed and revoked by an operator, checked by the server.

`create` returns the key once; only its hash is stored. `verify` answers None alike for a
key that is malformed, unknown, wrong, revoked or expired, so a caller learns nothing from
which it was.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agentledger.client.scope import Scope, operators_only, tenant_name
from agentledger.core.access import (
    check_approval_roles,
    check_role,
    key_hash,
    key_id_of,
    key_matches,
    new_key,
)
from agentledger.core.errors import InvalidRequest, NotFound
from agentledger.core.listings import ApiKeyRow, NewApiKey
from agentledger.store.api_key_store import ApiKeyStore

# A key's name is a label for people (who holds it, what for), shown by `keys list`.
NAME_CHARS = 100


class ApiKeys:
    """The HTTP server's keys, for an operator (every one an operator's act)."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope

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
        """A key for `agentledger serve` acting for `tenant` in `role`, labelled `name`:
        its row, with `key`, shown this once (Postgres keeps only its hash). An approver or
        admin key decides approvals that ask for its role, or for one of `approval_roles`
        (a spec's or a tenant rule's role, such as `finance`)."""
        tenant = tenant_name(tenant)
        if expires_in is not None and expires_in <= timedelta(0):
            raise InvalidRequest("--expires takes a span above 0, such as 30d or 12h")
        if name is not None and not (
            name.strip() and len(name) <= NAME_CHARS and name.isprintable()
        ):
            raise InvalidRequest(
                f"--name takes a label of 1 to {NAME_CHARS} printable characters, such as "
                "'inbox of the refunds team'"
            )
        decides = check_approval_roles(role, approval_roles or [])
        key_id, key = new_key()
        expires_at = datetime.now(UTC) + expires_in if expires_in is not None else None
        row = await ApiKeyStore(await self.scope.database()).add(
            key_id, tenant, check_role(role), key_hash(key), expires_at, name, decides
        )
        return NewApiKey.model_validate({**row, "key": key})

    @operators_only("keys list shows every tenant's keys")
    async def listed(self) -> list[ApiKeyRow]:
        rows = await ApiKeyStore(await self.scope.database()).listed()
        return [ApiKeyRow.model_validate(row) for row in rows]

    @operators_only("keys revoke closes a tenant's way in")
    async def revoke(self, key_id: str) -> ApiKeyRow:
        row = await ApiKeyStore(await self.scope.database()).revoke(key_id)
        if row is None:
            raise NotFound(f"no API key {key_id!r}: `agentledger keys list` shows them")
        return ApiKeyRow.model_validate(row)

    @operators_only("checking keys reads every tenant's keys")
    async def closed(self, key_ids: list[str]) -> set[str]:
        """Those of `key_ids` that no longer open the door: revoked, expired or gone."""
        return set(key_ids) - await ApiKeyStore(await self.scope.database()).live(key_ids)

    @operators_only("checking a key reads every tenant's keys")
    async def verify(self, key: str) -> ApiKeyRow | None:
        """The live key's row (tenant, role, key_id) if `key` is one, else None, alike for
        any key that does not open."""
        key_id = key_id_of(key)
        if key_id is None:
            return None
        row = await ApiKeyStore(await self.scope.database()).find(key_id)
        if row is None or not key_matches(key, row.pop("key_hash")):
            return None
        expired = row["expires_at"] is not None and row["expires_at"] <= datetime.now(UTC)
        if row["revoked_at"] is not None or expired:
            return None
        return ApiKeyRow.model_validate(row)
