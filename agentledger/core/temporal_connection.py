"""Where and how to reach Temporal, read the way the `temporal` CLI reads it.

`temporalio.envconfig` loads TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY,
TEMPORAL_TLS_* and TEMPORAL_PROFILE (a profile in the TOML file at TEMPORAL_CONFIG_FILE or
the user's `temporalio/temporal.toml`), so one set of variables or one profile serves the CLI,
the workers and `temporal` itself, Temporal Cloud included.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from temporalio.envconfig import ClientConfigProfile
from temporalio.service import TLSConfig

from agentledger.core.errors import ConnectionSettingsError


def load_profile(env: Mapping[str, str]) -> ClientConfigProfile:
    """The connection profile `env` selects (TEMPORAL_PROFILE, default "default"), with the
    TEMPORAL_* variables laid over it; empty when neither a file nor a variable says anything."""
    try:
        return ClientConfigProfile.load(override_env_vars=dict(env))
    except Exception as err:  # the SDK's core reports a bad file or profile as-is
        raise ConnectionSettingsError(
            f"cannot load the Temporal connection profile ({err}): check TEMPORAL_PROFILE "
            "and TEMPORAL_CONFIG_FILE, or unset them to use TEMPORAL_ADDRESS alone"
        ) from err


def connect_options(profile: ClientConfigProfile | None) -> dict[str, Any]:
    """`Client.connect` keyword arguments for TLS, API key and gRPC metadata.

    An API key turns TLS on (Temporal Cloud needs both); TEMPORAL_TLS=false turns it off.
    Address and namespace are left out: the caller's settings already resolved them.
    """
    if profile is None:
        return {}
    try:
        config = profile.to_client_connect_config()
    except OSError as err:
        raise ConnectionSettingsError(
            f"cannot read a Temporal TLS file ({err.filename}: {err.strerror}): check "
            "TEMPORAL_TLS_CLIENT_CERT_PATH, TEMPORAL_TLS_CLIENT_KEY_PATH and "
            "TEMPORAL_TLS_SERVER_CA_CERT_PATH"
        ) from err
    return {
        key: value for key, value in config.items() if key in ("api_key", "tls", "rpc_metadata")
    }


def describe(address: str, namespace: str, profile: ClientConfigProfile | None) -> str:
    """How a connection is made, without its secrets, for messages and logs."""
    options = connect_options(profile)
    tls = options.get("tls", False)
    parts = [f"{address} (namespace {namespace}"]
    if tls is not False:
        parts.append("TLS")
        if isinstance(tls, TLSConfig) and tls.client_cert:
            parts.append("client certificate")
    if options.get("api_key"):
        parts.append("API key")
    return ", ".join(parts) + ")"
