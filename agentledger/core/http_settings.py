"""The HTTP server's group of `AgentLedgerConfig` (its `http` field; `agentledger serve`,
docs/http.md): where it listens, what it admits, and whose tokens it accepts. Read with the
rest of the config from `AGENTLEDGER_HTTP_*` and `AGENTLEDGER_OIDC_*` variables
(agentledger/core/config.py); `serve`'s flags override them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError, field_validator

from agentledger.core.errors import SetupError
from agentledger.core.settings_base import ReadSettings, env


class HttpSettings(ReadSettings):
    host: str = env("AGENTLEDGER_HTTP_HOST", "127.0.0.1", "where `agentledger serve` listens")
    port: int = env("AGENTLEDGER_HTTP_PORT", 8321, "its port; 0: any free one")
    allow_origins: str = env(
        "AGENTLEDGER_HTTP_ALLOW_ORIGINS", "", "comma-separated origins browsers may call from"
    )
    body_limit_bytes: int = env(
        "AGENTLEDGER_HTTP_BODY_LIMIT_BYTES", 1_000_000, "a larger request body is refused (413)"
    )
    proxy_headers: bool = env(
        "AGENTLEDGER_HTTP_PROXY_HEADERS", False, "trust X-Forwarded-For/-Proto from a proxy"
    )
    requests_per_second: float = env(
        "AGENTLEDGER_HTTP_REQUESTS_PER_SECOND", 20.0, "each credential's rate (burst: 2 s of it)"
    )
    streams_per_key: int = env(
        "AGENTLEDGER_HTTP_STREAMS_PER_KEY", 8, "each credential's event streams open at once"
    )
    auth_failures: int = env(
        "AGENTLEDGER_HTTP_AUTH_FAILURES",
        10,
        "failed authentications one client address may make in the window; past it 429",
    )
    auth_failure_window_seconds: float = env(
        "AGENTLEDGER_HTTP_AUTH_FAILURE_WINDOW_SECONDS", 60.0, "the window those failures count in"
    )
    oidc_jwks_url: str | None = env(
        "AGENTLEDGER_OIDC_JWKS_URL", None, "accept bearer JWTs signed by this JWKS's keys"
    )
    oidc_issuer: str | None = env("AGENTLEDGER_OIDC_ISSUER", None, "the tokens' `iss`")
    oidc_audience: str | None = env("AGENTLEDGER_OIDC_AUDIENCE", None, "the tokens' `aud`")
    oidc_tenant_claim: str = env("AGENTLEDGER_OIDC_TENANT_CLAIM", "tenant", "names the tenant")
    oidc_roles_claim: str = env("AGENTLEDGER_OIDC_ROLES_CLAIM", "roles", "lists the roles")

    @field_validator(
        "body_limit_bytes",
        "streams_per_key",
        "requests_per_second",
        "auth_failures",
        "auth_failure_window_seconds",
    )
    @classmethod
    def _a_limit_is_positive(cls, value: float) -> float:
        if not (value > 0 and math.isfinite(value)):
            raise ValueError("a limit above 0")
        return value

    @field_validator("port")
    @classmethod
    def _a_port(cls, value: int) -> int:
        if not 0 <= value < 65536:
            raise ValueError("a port from 0 (any free one) to 65535")
        return value

    @classmethod
    def read(cls, environ: Mapping[str, str]) -> HttpSettings:
        """The HTTP server's variables of `environ`; one that does not parse is a SetupError."""
        named: dict[str, Any] = {k: v for k, v in environ.items() if v and k in HTTP_NAMES}
        try:
            return cls(**named)
        except ValidationError as err:
            problems = "; ".join(
                f"{e['loc'][0]}: {e['msg'].removeprefix('Value error, ')}" for e in err.errors()
            )
            raise SetupError(f"invalid setting: {problems}") from err

    def origins(self) -> list[str]:
        return [o.strip() for o in self.allow_origins.split(",") if o.strip()]


HTTP_NAMES = frozenset(
    field.validation_alias
    for field in HttpSettings.model_fields.values()
    if isinstance(field.validation_alias, str)
)
