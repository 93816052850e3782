"""Bearer JWTs from an OIDC issuer: the signature checked against the issuer's JWKS
(fetched within a bound and cached) with the algorithm of the key that signed it (the
JWK's `alg`, else its type's: RSA RS256, EC by its curve, OKP EdDSA), then `iss`, `aud`,
`exp`, `nbf` and `iat` with a leeway for clocks that disagree; the tenant and the roles
are the claims the settings name, and the tenant must be a tenant name. Verified with
PyJWT. Whatever is wrong with a token is a 401, never a failure of the server."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import jwt

from agentledger.client.scope import tenant_name
from agentledger.core.access import Caller, is_role_name
from agentledger.core.errors import InvalidRequest, ServiceUnreachable, SetupError
from agentledger.core.http_config import HttpConfig
from agentledger.core.identity import Identity
from agentledger.http.errors import unauthenticated

# Asymmetric algorithms only: a JWKS holds public keys, and "none" or HMAC never pass.
ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"]
FETCH_SECONDS = 5.0
CACHE_SECONDS = 300.0


class OidcVerifier:
    def __init__(self, settings: HttpConfig) -> None:
        if not settings.oidc_jwks_url:
            raise SetupError("OIDC needs AGENTLEDGER_OIDC_JWKS_URL")
        if not settings.oidc_issuer:
            raise SetupError(
                "AGENTLEDGER_OIDC_JWKS_URL is set without AGENTLEDGER_OIDC_ISSUER: name the issuer "
                "whose tokens to accept"
            )
        self.issuer = settings.oidc_issuer
        self.audience = settings.oidc_audience
        self.tenant_claim = settings.oidc_tenant_claim
        self.roles_claim = settings.oidc_roles_claim
        self.leeway = settings.oidc_leeway_seconds
        self.keys = jwt.PyJWKClient(
            settings.oidc_jwks_url,
            cache_keys=True,
            lifespan=CACHE_SECONDS,
            timeout=FETCH_SECONDS,
        )

    async def caller(self, token: str) -> Caller:
        try:
            key = await asyncio.to_thread(self.keys.get_signing_key_from_jwt, token)
            if key.algorithm_name not in ALGORITHMS:
                raise jwt.InvalidAlgorithmError(
                    f"the issuer's key is for {key.algorithm_name}, not a public-key algorithm"
                )
            # The key (a PyJWK) binds the algorithm: a token whose `alg` differs is refused.
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=ALGORITHMS,
                issuer=self.issuer,
                audience=self.audience,
                leeway=self.leeway,
                options={"require": ["exp", "iss", "sub"], "verify_aud": bool(self.audience)},
            )
        except jwt.PyJWKClientConnectionError as err:
            raise ServiceUnreachable(
                f"the issuer's keys (AGENTLEDGER_OIDC_JWKS_URL) could not be fetched: {err}; "
                "try again shortly"
            ) from err
        except (jwt.PyJWTError, ValueError, TypeError, KeyError) as err:
            raise unauthenticated(f"the bearer token was not accepted: {err}") from err
        tenant = claims.get(self.tenant_claim)
        if not isinstance(tenant, str) or not tenant:
            raise unauthenticated(f"the token names no tenant (claim {self.tenant_claim!r})")
        try:
            tenant_name(tenant)
        except InvalidRequest as err:
            raise unauthenticated(f"the token's {self.tenant_claim!r} claim: {err}") from err
        raw = claims.get(self.roles_claim, [])
        named = raw.split() if isinstance(raw, str) else raw if isinstance(raw, list) else []
        email = claims.get("email")
        return Caller(
            tenant=tenant,
            # The access roles, and the approval roles (finance, legal) it decides in.
            roles=frozenset(r for r in named if isinstance(r, str) and is_role_name(r)),
            identity=Identity.of_token(
                self.issuer, str(claims["sub"]), email if isinstance(email, str) else None
            ),
            credential=f"oidc:{self.issuer}:{claims['sub']}",
            expires_at=datetime.fromtimestamp(float(claims["exp"]) + self.leeway, UTC),
        )
