"""Who asked for a run or decided an approval, as the credential proved it. Public.

An `Identity` is made only from a credential the door or the client verified: an API key's
row (its id, and the name it was created with), an OIDC token's issuer and subject (and
its email), an approver's registered signing key, or the operator (whoever holds the
stack's own connections: the CLI and the Python client without an approver key). A field a
caller sends (a run's `user`) is never one: it is kept as "on behalf of".
"""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

IdentityKind = Literal["key", "oidc", "approver", "operator", "hook"]


class Identity(BaseModel):
    """One authenticated identity: `ref` tells two apart, `name` is what people read."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: IdentityKind = Field(
        description="what proved it: an API key, an OIDC token, an approver's signing key, "
        "the operator's own connections, or a webhook delivery's signature (a hook's)"
    )
    id: str = Field(
        min_length=1,
        max_length=500,
        description="what proves it: a key's id, an OIDC issuer and subject, an approver "
        "key's fingerprint, the operator's name",
    )
    name: str = Field(
        min_length=1,
        max_length=200,
        description="what people read: a key's name, a token's email or subject, an "
        "approver's name",
    )
    email: str | None = Field(None, max_length=320, description="an OIDC token's email claim")

    @property
    def ref(self) -> str:
        """The identity, compared: two decisions by one credential share it."""
        return f"{self.kind}:{self.id}"

    @classmethod
    def of_key(cls, key_id: str, name: str | None) -> Identity:
        return cls(kind="key", id=key_id, name=name or f"key:{key_id}")

    @classmethod
    def of_token(cls, issuer: str, subject: str, email: str | None = None) -> Identity:
        """A token's issuer and subject (a digest of them past the id's length), and its
        email, when it has one that fits, as its name."""
        proof = f"{issuer}#{subject}"
        if len(proof) > 500:
            proof = "sha256:" + hashlib.sha256(proof.encode()).hexdigest()
        email = email if email and len(email) <= 200 else None
        name = email or subject[:200] or proof[:200]
        return cls(kind="oidc", id=proof, name=name, email=email)

    @classmethod
    def of_approver(cls, fingerprint: str, name: str) -> Identity:
        return cls(kind="approver", id=fingerprint, name=name)


# The stack's own operator: the CLI and the Python client acting without an approver key.
OPERATOR = Identity(kind="operator", id="operator", name="operator")
