"""How a route learns who calls, and for which tenant: `caller(request, need=ROLE)`, the
only way. The credential decides the tenant (an API key's row, or a verified token's
claim); no header, body field or query parameter is read for it. `runs_for(request, who)`
is the RunClient acting as that caller, so every operation goes through the caller's
scope (agentledger/client/scope.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from agentledger.client.run_client import RunClient
from agentledger.core.access import KEY_PREFIX, Caller
from agentledger.core.http_settings import HttpSettings
from agentledger.http.errors import HttpRefusal, unauthenticated
from agentledger.http.limits import FailedAuth, RequestRate, StreamSlots
from agentledger.http.oidc import OidcVerifier


@dataclass
class Door:
    """What the server shares among requests: the operator's RunClient (each request gets
    a tenant's view of it), the token verifier, and the limits."""

    runs: RunClient
    settings: HttpSettings
    oidc: OidcVerifier | None
    rate: RequestRate
    streams: StreamSlots
    failures: FailedAuth

    @classmethod
    def open(cls, runs: RunClient, settings: HttpSettings) -> Door:
        return cls(
            runs=runs,
            settings=settings,
            oidc=OidcVerifier(settings) if settings.oidc_jwks_url else None,
            rate=RequestRate(settings.requests_per_second),
            streams=StreamSlots(settings.streams_per_key),
            failures=FailedAuth(settings.auth_failures, settings.auth_failure_window_seconds),
        )


def door_of(request: Request) -> Door:
    door: Door = request.app.state.door
    return door


def client_address(request: Request) -> str:
    """Where the request comes from: the peer, or with `--proxy-headers` the address the
    proxy's `X-Forwarded-For` names (uvicorn reads it into the request's client then)."""
    return request.client.host if request.client else "unknown"


async def authenticate(request: Request) -> Caller:
    """The caller its `Authorization: Bearer` credential names; 401 without a valid one,
    429 for an address that failed too often lately (`FailedAuth`)."""
    failures = door_of(request).failures
    address = client_address(request)
    failures.check(address)
    try:
        return await verified(request)
    except HttpRefusal as refusal:
        if refusal.status == 401:
            failures.failed(address)
        raise


async def verified(request: Request) -> Caller:
    door = door_of(request)
    scheme, _, credential = request.headers.get("authorization", "").partition(" ")
    credential = credential.strip()
    if scheme.lower() != "bearer" or not credential:
        raise unauthenticated(
            "send `Authorization: Bearer <key>` (`agentledger keys create`) or an OIDC token"
        )
    if credential.startswith(KEY_PREFIX) or door.oidc is None:
        row = await door.runs.keys.verify(credential)
        if row is None:
            raise unauthenticated("this key is unknown, revoked or expired")
        key_id = row.key_id
        return Caller(
            tenant=row.tenant,
            roles=frozenset({row.role}),
            identity=f"key:{key_id}",
            credential=f"key:{key_id}",
        )
    return await door.oidc.caller(credential)


async def caller(request: Request, *, need: str) -> Caller:
    """The authenticated caller, if it may act as `need` (viewer, runner, approver, admin);
    counted against its request rate. 401 without a valid credential, 403 without the role,
    429 past the rate."""
    who = await authenticate(request)
    door_of(request).rate.take(who.credential)
    if not who.may(need):
        have = ", ".join(sorted(who.roles)) or "no role"
        raise HttpRefusal(
            403, "forbidden", f"this needs the {need} role; this credential has {have}"
        )
    return who


def runs_for(request: Request, who: Caller) -> RunClient:
    """The RunClient acting as the caller: its identity, within its tenant alone."""
    return door_of(request).runs.acting_as(who)


async def json_body(request: Request) -> dict[str, Any]:
    """The request's JSON object, read up to the body limit (413 past it, 400 if not JSON);
    an empty body is an empty object."""
    limit = door_of(request).settings.body_limit_bytes
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_large(limit)
    if not body.strip():
        return {}
    try:
        value = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise HttpRefusal(400, "invalid_input", f"the body is not JSON: {err}") from err
    if not isinstance(value, dict):
        raise HttpRefusal(400, "invalid_input", "the body must be a JSON object")
    return value


def too_large(limit: int) -> HttpRefusal:
    return HttpRefusal(
        413,
        "too_large",
        f"the request body is over {limit} bytes (AGENTLEDGER_HTTP_BODY_LIMIT_BYTES)",
    )
