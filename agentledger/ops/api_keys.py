"""The HTTP door's API keys: made, listed and revoked by an operator, checked by the server.

`create` returns the key once; only its hash is stored. `verify` answers None alike for a
key that is malformed, unknown, wrong, revoked or expired, so a caller learns nothing from
which it was.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from psycopg_pool import AsyncConnectionPool

from agentledger.core.access import (
    check_approval_roles,
    check_role,
    key_hash,
    key_id_of,
    key_matches,
    new_key,
)
from agentledger.core.errors import InvalidRequest, NotFound
from agentledger.core.keys import id_part
from agentledger.core.listings import ApiKeyRow, NewApiKey
from agentledger.store.api_key_store import ApiKeyStore

# A key's name is a label for people (who holds it, what for), shown by `keys list`.
NAME_CHARS = 100


async def create(
    pool: AsyncConnectionPool,
    tenant: str,
    role: str,
    *,
    expires_in: timedelta | None,
    name: str | None = None,
    approval_roles: list[str] | None = None,
) -> NewApiKey:
    """A new key for `tenant` in `role`, named `name` if given: its row, with `key`, shown
    this once. `approval_roles`: roles an approval may ask for (a spec's or the tenant's
    rules', such as `finance`) that an approver or admin key decides in, beside its own."""
    if not tenant or id_part(tenant) != tenant:
        raise InvalidRequest(
            f"tenant {tenant!r} is not a tenant name: letters, digits, '-' and '_' only"
        )
    if expires_in is not None and expires_in <= timedelta(0):
        raise InvalidRequest("--expires takes a span above 0, such as 30d or 12h")
    if name is not None and not (name.strip() and len(name) <= NAME_CHARS and name.isprintable()):
        raise InvalidRequest(
            f"--name takes a label of 1 to {NAME_CHARS} printable characters, such as "
            "'inbox of the refunds team'"
        )
    decides = check_approval_roles(role, approval_roles or [])
    key_id, key = new_key()
    expires_at = datetime.now(UTC) + expires_in if expires_in is not None else None
    row = await ApiKeyStore(pool).add(
        key_id, tenant, check_role(role), key_hash(key), expires_at, name, decides
    )
    return NewApiKey.model_validate({**row, "key": key})


async def listed(pool: AsyncConnectionPool) -> list[ApiKeyRow]:
    return [ApiKeyRow.model_validate(row) for row in await ApiKeyStore(pool).listed()]


async def revoke(pool: AsyncConnectionPool, key_id: str) -> ApiKeyRow:
    row = await ApiKeyStore(pool).revoke(key_id)
    if row is None:
        raise NotFound(f"no API key {key_id!r}: `agentledger keys list` shows them")
    return ApiKeyRow.model_validate(row)


async def verify(pool: AsyncConnectionPool, key: str) -> ApiKeyRow | None:
    """The live key's row (tenant, role, key_id) if `key` is one, else None."""
    key_id = key_id_of(key)
    if key_id is None:
        return None
    row = await ApiKeyStore(pool).find(key_id)
    if row is None or not key_matches(key, row.pop("key_hash")):
        return None
    expired = row["expires_at"] is not None and row["expires_at"] <= datetime.now(UTC)
    if row["revoked_at"] is not None or expired:
        return None
    return ApiKeyRow.model_validate(row)
