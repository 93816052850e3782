"""The HTTP server's group of `AgentLedgerConfig` (its `http` field; `agentledger serve`):
where it listens, what it admits, how long it waits, and whose tokens and
proxies it believes. Read with the rest of the config from `AGENTLEDGER_HTTP_*` and
`AGENTLEDGER_OIDC_*` variables; `serve`'s flags override them (`with_flags`)."""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError, field_validator

from agentledger.core.config_base import ConfigBase, env
from agentledger.core.errors import SetupError

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class HttpConfig(ConfigBase):
    host: str = env("AGENTLEDGER_HTTP_HOST", "127.0.0.1", "where `agentledger serve` listens")
    port: int = env("AGENTLEDGER_HTTP_PORT", 8321, "its port; 0: any free one")
    allow_origins: str = env(
        "AGENTLEDGER_HTTP_ALLOW_ORIGINS", "", "comma-separated origins browsers may call from"
    )
    body_limit_bytes: int = env(
        "AGENTLEDGER_HTTP_BODY_LIMIT_BYTES", 1_000_000, "a larger request body is refused (413)"
    )
    json_depth: int = env(
        "AGENTLEDGER_HTTP_JSON_DEPTH", 32, "a body nested deeper (objects, lists) is refused (400)"
    )
    header_timeout_seconds: float = env(
        "AGENTLEDGER_HTTP_HEADER_TIMEOUT_SECONDS",
        10.0,
        "a request's headers not all in by then: 408, and the connection closed",
    )
    body_timeout_seconds: float = env(
        "AGENTLEDGER_HTTP_BODY_TIMEOUT_SECONDS",
        30.0,
        "a request's body not all in by then: 408",
    )
    connections: int = env(
        "AGENTLEDGER_HTTP_CONNECTIONS",
        1000,
        "connections open at once, in all; past it a new one is answered 503 and closed",
    )
    connections_per_address: int = env(
        "AGENTLEDGER_HTTP_CONNECTIONS_PER_ADDRESS",
        100,
        "connections open at once from one client address (a trusted proxy's: no limit); "
        "past it a new one is answered 429 and closed",
    )
    proxy_headers: bool = env(
        "AGENTLEDGER_HTTP_PROXY_HEADERS",
        False,
        "believe X-Forwarded-For/-Proto, from the trusted proxies alone",
    )
    trusted_proxies: str = env(
        "AGENTLEDGER_HTTP_TRUSTED_PROXIES",
        "127.0.0.1,::1",
        "comma-separated addresses or networks (10.0.0.0/8) of the proxies whose "
        "X-Forwarded-For is believed",
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
    oidc_leeway_seconds: float = env(
        "AGENTLEDGER_OIDC_LEEWAY_SECONDS",
        60.0,
        "clock skew allowed between the issuer and this server (exp, nbf, iat)",
    )

    @field_validator(
        "body_limit_bytes",
        "json_depth",
        "header_timeout_seconds",
        "body_timeout_seconds",
        "connections",
        "connections_per_address",
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

    @field_validator("oidc_leeway_seconds")
    @classmethod
    def _a_leeway(cls, value: float) -> float:
        if not (0 <= value <= 3600 and math.isfinite(value)):
            raise ValueError("seconds from 0 to 3600")
        return value

    @field_validator("port")
    @classmethod
    def _a_port(cls, value: int) -> int:
        if not 0 <= value < 65536:
            raise ValueError("a port from 0 (any free one) to 65535")
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _proxy_networks(cls, value: str) -> str:
        proxy_networks(value)
        return value

    @classmethod
    def read(
        cls, environ: Mapping[str, str], overrides: Mapping[str, Any] | None = None
    ) -> HttpConfig:
        """The door's variables of `environ`, with `overrides` (by field name: a command's
        flags) over them; one that does not parse is a SetupError naming it."""
        named: dict[str, Any] = {k: v for k, v in environ.items() if v and k in HTTP_NAMES}
        return cls._validated(named, overrides)

    def with_flags(self, overrides: Mapping[str, Any]) -> HttpConfig:
        """This group with a command's flags (by field name) over it, each checked as its
        variable is; one that does not parse is a SetupError naming it."""
        named = {
            str(field.validation_alias or name): getattr(self, name)
            for name, field in type(self).model_fields.items()
        }
        return self._validated(named, overrides)

    @classmethod
    def _validated(cls, named: dict[str, Any], overrides: Mapping[str, Any] | None) -> HttpConfig:
        aliases = {name: field.validation_alias for name, field in cls.model_fields.items()}
        for name, value in (overrides or {}).items():
            named[str(aliases.get(name) or name)] = value
        try:
            return cls(**named)
        except ValidationError as err:
            problems = "; ".join(
                f"{e['loc'][0]}: {e['msg'].removeprefix('Value error, ')}" for e in err.errors()
            )
            raise SetupError(f"invalid setting: {problems}") from err

    def origins(self) -> list[str]:
        return [o.strip() for o in self.allow_origins.split(",") if o.strip()]

    def proxies(self) -> list[Network]:
        """The networks whose X-Forwarded-For is believed (none without proxy headers)."""
        return proxy_networks(self.trusted_proxies) if self.proxy_headers else []


def proxy_networks(value: str) -> list[Network]:
    """`10.0.0.0/8, 127.0.0.1` as networks; anything else (a host name, `*`) refused: a
    proxy is named by its address, and trusting every address would let any client
    choose the address it is counted by."""
    networks: list[Network] = []
    for part in (p.strip() for p in value.split(",")):
        if not part:
            continue
        try:
            networks.append(ipaddress.ip_network(part, strict=False))
        except ValueError as err:
            raise ValueError(
                f"{part!r} is not an address or a network such as 10.0.0.0/8; name each "
                "proxy (trusting every address would let any client pick its own)"
            ) from err
    return networks


HTTP_NAMES = frozenset(
    field.validation_alias
    for field in HttpConfig.model_fields.values()
    if isinstance(field.validation_alias, str)
)
