"""The one way every entry point connects to Temporal: same address, namespace, converter
(pydantic, encrypted when AGENTLEDGER_ENCRYPTION_KEYS is set), and the same telemetry
(Prometheus metrics for worker processes, OpenTelemetry tracing)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from temporalio.client import Client, Plugin
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from agentledger.core.config import AgentLedgerConfig
from agentledger.core.errors import ServiceUnreachable, SetupError
from agentledger.core.set_up_bound import seconds_left
from agentledger.core.temporal_connection import describe
from agentledger.temporal.encryption import data_converter
from agentledger.temporal.telemetry import client_interceptors
from agentledger.temporal.worker_presence import NoAnswer, within

log = logging.getLogger(__name__)

# One runtime per metrics address: its endpoint binds the port for the life of the process.
_runtimes: dict[str, Runtime] = {}


def runtime_for(settings: AgentLedgerConfig) -> Runtime | None:
    """The Temporal runtime whose Prometheus endpoint serves the SDK's metrics at
    AGENTLEDGER_PROMETHEUS_BIND (`/metrics`); None (the SDK's default runtime) when unset."""
    bind = settings.prometheus_bind
    if not bind:
        return None
    if bind not in _runtimes:
        try:
            _runtimes[bind] = Runtime(
                telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=bind))
            )
        except Exception as err:  # the core reports a bad address or a taken port as-is
            raise SetupError(
                f"cannot serve Prometheus metrics at {bind!r} ({err}): set "
                "AGENTLEDGER_PROMETHEUS_BIND to a free host:port, one per worker process"
            ) from err
    return _runtimes[bind]


async def connect(
    settings: AgentLedgerConfig,
    *,
    identity: str | None = None,
    serve_metrics: bool = False,
    within_seconds: float | None = None,
    ends_at: float | None = None,
    runtime: Runtime | None = None,
    plugins: Sequence[Plugin] = (),
) -> Client:
    """A client for `settings`. Worker processes pass `serve_metrics=True`; short-lived
    commands do not, so they never contend for the port a worker on the same host serves.
    Commands pass `within_seconds`, so an unresponsive server is an answer, not a hang (and
    `ends_at`, where their bound ends: agentledger.core.set_up_bound).
    An application (or a test) that keeps its own `runtime` passes it: its metrics, the
    SDK's and agentledger's, go where that runtime sends them. `plugins` go to the Client
    (`AgentLedgerPlugin`: agentledger.worker.plugin)."""
    if within_seconds is not None:
        try:
            return await within(
                seconds_left(within_seconds, ends_at),
                connect(
                    settings,
                    identity=identity,
                    serve_metrics=serve_metrics,
                    runtime=runtime,
                    plugins=plugins,
                ),
            )
        except NoAnswer as err:
            raise ServiceUnreachable(
                f"Temporal at {settings.temporal_address} did not answer within "
                f"{within_seconds:g}s: check TEMPORAL_ADDRESS, start the local stack "
                "with `agentledger up`, or wait longer with --wait"
            ) from err
    try:
        return await Client.connect(
            **client_options(
                settings, identity=identity, serve_metrics=serve_metrics, runtime=runtime
            ),
            plugins=plugins,
        )
    except RuntimeError as err:
        raise unreachable(settings, err) from err


def client_options(
    settings: AgentLedgerConfig,
    *,
    identity: str | None = None,
    serve_metrics: bool = False,
    runtime: Runtime | None = None,
) -> dict[str, Any]:
    """`Client.connect`'s arguments for `settings` (address, namespace, TLS or API key,
    converter, tracing, the metrics runtime): `connect` passes them, and so does a worker.py
    that connects its own Client (agentledger.WorkerEdge)."""
    if runtime is None and serve_metrics:
        runtime = runtime_for(settings)
    return {
        **settings.client_connect_config(),
        "data_converter": data_converter(settings),
        "identity": identity,
        "interceptors": client_interceptors(settings),
        "runtime": runtime,
    }


def is_connect_failure(err: RuntimeError) -> bool:
    """Whether `err` is the SDK's failed `Client.connect` (its message says so)."""
    return str(err).startswith("Failed client connect")


def unreachable(settings: AgentLedgerConfig, err: RuntimeError) -> ServiceUnreachable:
    """The error for a failed `Client.connect` to the server `settings` name (the SDK's
    message is logged at DEBUG)."""
    where = describe(
        settings.temporal_address, settings.temporal_namespace, settings.temporal_profile
    )
    log.debug("connecting to Temporal at %s failed: %s", where, err)
    return ServiceUnreachable(
        f"cannot reach Temporal at {where}: {connect_failure(err)}; start the local "
        "stack with `agentledger up`, or set TEMPORAL_ADDRESS (and TEMPORAL_API_KEY or "
        "TEMPORAL_TLS_* for a cluster that needs them)"
    )


# What a failed connect's transport error means, in the words a person checks it by.
_CONNECT_FAILURES = (
    (("connection refused",), "nothing accepts connections there"),
    (("dns error", "failed to lookup", "name or service not known"), "no such host"),
    (("tls", "certificate", "handshake"), "the TLS handshake failed"),
    (("unauthenticated", "permission denied", "api key"), "the server refused the credentials"),
    (("timed out", "deadline"), "no answer"),
)


def connect_failure(err: Exception) -> str:
    """Why a connection to Temporal failed, in a few words (the SDK's message is a chain of
    Rust transport errors; it is logged at DEBUG)."""
    text = str(err).lower()
    for needles, meaning in _CONNECT_FAILURES:
        if any(needle in text for needle in needles):
            return meaning
    return "the connection failed"
