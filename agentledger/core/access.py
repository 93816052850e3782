"""Who calls over HTTP: API keys' shape and hash, the roles, and the `Caller` a credential
yields.

A key is `ark_<key_id>_<secret>`: the id finds its row, the secret (32 random bytes) is the
proof. Postgres keeps only the sha256 of the whole key, compared in constant time, so a
leaked table opens nothing. The tenant is the credential's, never the request's: a `Caller`
is made only from a key's row or a verified token, and its tenant is a tenant name by the
one rule (`tenant_name` in agentledger/client/scope.py), so no two tenants' run ids meet.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from agentledger.core.errors import InvalidRequest

Role = Literal["viewer", "runner", "approver", "admin"]
ROLES: tuple[Role, ...] = ("viewer", "runner", "approver", "admin")
# What each role may do: a runner and an approver read too; an admin does all of it.
GRANTS: dict[str, frozenset[str]] = {
    "viewer": frozenset({"viewer"}),
    "runner": frozenset({"viewer", "runner"}),
    "approver": frozenset({"viewer", "approver"}),
    "admin": frozenset(ROLES),
}
KEY_PREFIX = "ark_"
_KEY = re.compile(r"ark_([0-9a-f]{16})_([A-Za-z0-9_-]{43})")


@dataclass(frozen=True)
class Caller:
    """An authenticated caller: the tenant its credential names (None: the operator, who
    acts for every tenant), what it may do, and who it is (recorded as the `by` of its
    decisions)."""

    tenant: str | None
    roles: frozenset[str]
    identity: str
    credential: str  # what limits count against: a key's id, a token's issuer and subject
    key_id: str | None = None  # an API key's, which can be revoked while in use
    expires_at: datetime | None = None  # when the credential stops opening the door

    def may(self, need: str) -> bool:
        return any(need in GRANTS.get(role, frozenset()) for role in self.roles)


def check_role(role: str) -> Role:
    for known in ROLES:
        if role == known:
            return known
    raise InvalidRequest(f"unknown role {role!r}: one of {', '.join(ROLES)}")


def new_key() -> tuple[str, str]:
    """A fresh key and its id."""
    key_id = secrets.token_hex(8)
    return key_id, f"{KEY_PREFIX}{key_id}_{secrets.token_urlsafe(32)}"


def key_id_of(key: str) -> str | None:
    """The id a presented key claims; None for anything not shaped like one of ours."""
    match = _KEY.fullmatch(key)
    return match.group(1) if match else None


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def key_matches(key: str, stored_hash: str) -> bool:
    return hmac.compare_digest(key_hash(key), stored_hash)
