"""Who calls: API keys' shape and hash, the roles, and the `Caller` a credential yields.

A key is `ark_<key_id>_<secret>`: the id finds its row, the secret (32 random bytes) is the
proof. Postgres keeps only the sha256 of the whole key, compared in constant time, so a
leaked table opens nothing. The tenant and the identity are the credential's, never the
request's: a `Caller` is made only from a key's row, a verified token, or (`operator`) the
stack's own connections, and its tenant is a tenant name by the one rule (`tenant_name` in
agentledger.client.scope), so no two tenants' run ids meet.

Roles are of two kinds: the four access roles (what a credential may do at all), and the
roles an approval may ask for (a spec's `approval.roles`, a tenant rule's `by finance`). A
credential decides an approval in the role the approval asks for, when it holds it: an
approver or admin key that names it (`keys create --decides finance`), a token whose roles
claim lists it, or an access role that grants it (`admin` grants `approver`).
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
from agentledger.core.identity import Identity

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


_APPROVAL_ROLE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")


@dataclass(frozen=True)
class Caller:
    """An authenticated caller: the tenant its credential names (None: the operator, who
    acts for every tenant), what it may do (its access roles, and the approval roles it
    decides in), and who it is, as the credential proved it."""

    tenant: str | None
    roles: frozenset[str]
    identity: Identity
    credential: str  # what limits count against: a key's id, a token's issuer and subject
    key_id: str | None = None  # an API key's, which can be revoked while in use
    expires_at: datetime | None = None  # when the credential stops opening the door

    def may(self, need: str) -> bool:
        return any(need in GRANTS.get(role, frozenset()) for role in self.roles)

    def decides_as(self, required_role: str) -> bool:
        """Whether this caller may decide an approval that asks for `required_role`."""
        return self.may("approver") and (
            required_role in self.roles or (self.may(required_role) and required_role in GRANTS)
        )


def is_role_name(name: str) -> bool:
    """An access role or an approval role's name."""
    return bool(_APPROVAL_ROLE.fullmatch(name))


def check_approval_roles(role: str, approval_roles: list[str]) -> list[str]:
    """The approval roles a key of `role` may carry: names, and only on a key that decides."""
    if approval_roles and role not in ("approver", "admin"):
        raise InvalidRequest(
            f"only an approver or admin key decides approvals; a {role} key takes no --decides"
        )
    bad = [r for r in approval_roles if not is_role_name(r)]
    if bad:
        raise InvalidRequest(
            f"--decides takes role names (letters, digits, '-' and '_'), not {', '.join(bad)}"
        )
    return sorted(set(approval_roles))


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
