"""How a route learns who calls, and for which tenant: `authenticate(request)`, the only
way. The credential decides the tenant (an API key's row, or a verified token's claim); no
header, body field or query parameter is read for it, and it is checked before any body is
read. `runs_for(request, who)` is the RunClient acting as that caller, so every operation
goes through the caller's scope (agentledger.client.scope).
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from agentledger.client.run_client import RunClient
from agentledger.core.access import KEY_PREFIX, Caller
from agentledger.core.http_config import HttpConfig
from agentledger.core.identity import Identity
from agentledger.http.errors import HttpRefusal, unauthenticated
from agentledger.http.limits import FailedAuth, RequestRate
from agentledger.http.oidc import OidcVerifier
from agentledger.http.streams import Streams


@dataclass
class Door:
    """What the server shares among requests: the operator's RunClient (each request gets
    a tenant's view of it), the token verifier, and the limits."""

    runs: RunClient
    config: HttpConfig
    oidc: OidcVerifier | None
    rate: RequestRate
    streams: Streams
    failures: FailedAuth

    @classmethod
    def open(cls, runs: RunClient, config: HttpConfig) -> Door:
        return cls(
            runs=runs,
            config=config,
            oidc=OidcVerifier(config) if config.oidc_jwks_url else None,
            rate=RequestRate(config.requests_per_second),
            streams=Streams(config.streams_per_key, runs.keys.closed),
            failures=FailedAuth(config.auth_failures, config.auth_failure_window_seconds),
        )


def door_of(request: Request) -> Door:
    door: Door = request.app.state.door
    return door


def client_address(request: Request) -> str:
    """Where the request comes from: the peer, or, when the peer is a trusted proxy (with
    proxy headers on), the address its `X-Forwarded-For` names (uvicorn reads it into the
    request's client then, right to left, past the trusted proxies)."""
    return request.client.host if request.client else "unknown"


async def authenticate(request: Request) -> Caller:
    """The caller its `Authorization: Bearer` credential names, counted against its request
    rate; 401 without a valid one, 429 for an address that failed too often lately
    (`FailedAuth`) or a credential past its rate."""
    door = door_of(request)
    address = client_address(request)
    door.failures.check(address)
    try:
        who = await verified(request)
    except HttpRefusal as refusal:
        if refusal.status == 401:
            door.failures.failed(address)
        raise
    door.rate.take(who.credential)
    return who


async def verified(request: Request) -> Caller:
    door = door_of(request)
    scheme, _, credential = request.headers.get("authorization", "").partition(" ")
    credential = credential.strip()
    if scheme.lower() != "bearer" or not credential:
        raise unauthenticated(
            "send `Authorization: Bearer <key>` (an operator makes one with `agentledger keys "
            "create --tenant TENANT --role runner`) or an OIDC token"
        )
    if credential.startswith(KEY_PREFIX) or door.oidc is None:
        row = await door.runs.keys.verify(credential)
        if row is None:
            raise unauthenticated("this key is unknown, revoked or expired")
        return Caller(
            tenant=row.tenant,
            roles=frozenset({row.role, *row.approval_roles}),
            identity=Identity.of_key(row.key_id, row.name),
            credential=f"key:{row.key_id}",
            key_id=row.key_id,
            expires_at=row.expires_at,
        )
    return await door.oidc.caller(credential)


def require(who: Caller, need: str) -> None:
    """403 unless the caller may act as `need` (viewer, runner, approver, admin)."""
    if not who.may(need):
        have = ", ".join(sorted(who.roles)) or "no role"
        raise HttpRefusal(
            403, "forbidden", f"this needs the {need} role; this credential has {have}"
        )


async def caller(request: Request, *, need: str) -> Caller:
    """The authenticated caller, if it may act as `need`: 401, 429 or 403 otherwise."""
    who = await authenticate(request)
    require(who, need)
    return who


def runs_for(request: Request, who: Caller) -> RunClient:
    """The RunClient acting as the caller: its identity, within its tenant alone."""
    return door_of(request).runs.acting_as(who)
