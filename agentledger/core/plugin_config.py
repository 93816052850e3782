"""`agentledger.AgentLedgerConfig`: what the plugin (and a RunClient on the same Client) needs,
passed as an object with documented fields instead of read from the environment.

The environment is read at the edges only (the `agentledger` command, `agentledger-worker`,
`agentledger up`), which build `Settings`; an application builds this object, and the engine
below the plugin reads nothing else.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from psycopg_pool import AsyncConnectionPool

from agentledger.core.constants import OFFLINE_MODEL, TASK_QUEUE
from agentledger.core.providers import load_providers, provider_keys
from agentledger.core.settings import Settings


@dataclass(frozen=True)
class AgentLedgerConfig:
    """Everything agentledger needs inside your Temporal app.

    The mirror: `database` is a Postgres URL (the plugin opens, migrates and closes its pool
    with the worker) or an open `psycopg_pool.AsyncConnectionPool` you own.
    """

    database: str | AsyncConnectionPool
    # Models and providers: an OpenAI-compatible endpoint (None: OpenAI's own), its key, the
    # default model, and named providers (a YAML/JSON file or inline JSON,
    # agentledger.core.providers) that a run's `model: provider/name` picks from, with their
    # keys by provider name: a provider's `api_key_env` is read by you, not by agentledger
    # (`config.with_provider_keys(os.environ)` where your app starts).
    model_base_url: str | None = None
    model_api_key: str = "offline"
    model: str = OFFLINE_MODEL
    providers: str | None = None
    provider_keys: Mapping[str, str] = field(default_factory=dict)
    model_prices: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    # Tools: registries, tools, lists of them, or `PKG.MODULE:ATTR` references; `demo` adds
    # the demo's tools (agentledger.demo).
    tools: Sequence[Any] = ()
    demo: bool = False
    # The sandbox: a Docker image that serves `run_code` (`agentledger sandbox build`), and its
    # limits (`seconds=60,memory_mb=512`).
    sandbox_image: str | None = None
    sandbox_limits: str = ""
    # Queues and fairness: the run queue the engine registers on (None: every worker the
    # plugin is on) and, with `side_queues`, its model-call and mirror queues served from the
    # same process (False: another worker, e.g. `agentledger-worker`, serves them). Tenants'
    # weights and model-call rates are pushed to the server when a worker starts.
    task_queue: str | None = None
    side_queues: bool = True
    tenant: str | None = None  # a RunClient on this config acts for this tenant only
    # Telemetry: agent spans (invoke_agent, model and tool calls) in your OpenTelemetry
    # tracer provider, and whether they carry prompts, answers and tool data.
    telemetry: bool = False
    telemetry_content: bool = False
    # Encryption: AES-256 keys by id, for when your own data converter has no codec (yours
    # always wins: agentledger's payloads go through it).
    encryption_keys: Mapping[str, bytes] = field(default_factory=dict)
    encryption_key_id: str | None = None
    search_attributes: bool = True
    payload_limit_bytes: int = Settings.model_fields["payload_limit_bytes"].default
    artifact_threshold_bytes: int = Settings.model_fields["artifact_threshold_bytes"].default
    # The edge's own settings (`from_settings`), which keep what has no field here (the
    # worker's tuning, the build, model streaming, ...); the fields above win over them.
    base: Settings | None = field(default=None, repr=False)

    @classmethod
    def from_settings(cls, settings: Settings, **given: Any) -> AgentLedgerConfig:
        """The config the edges (`agentledger-worker`, `RunClient.connect`) build from the
        `Settings` they read; `given` overrides fields (the tools they loaded, say)."""
        fields: dict[str, Any] = {
            "database": settings.database_url or "",
            "model_base_url": settings.openai_base_url,
            "model_api_key": settings.openai_api_key.get_secret_value(),
            "model": settings.model,
            "providers": settings.providers,
            "model_prices": settings.model_prices,
            "sandbox_image": settings.sandbox,
            "sandbox_limits": settings.sandbox_limits,
            "task_queue": settings.task_queue,
            "tenant": settings.tenant,
            "telemetry": settings.otel,
            "telemetry_content": settings.otel_capture_content,
            "encryption_keys": settings.encryption_key_material(),
            "encryption_key_id": settings.encryption_key_id,
            "search_attributes": settings.search_attributes,
            "payload_limit_bytes": settings.payload_limit_bytes,
            "artifact_threshold_bytes": settings.artifact_threshold_bytes,
            "base": settings,
        }
        return cls(**{**fields, **given})

    def with_provider_keys(self, environ: Mapping[str, str]) -> AgentLedgerConfig:
        """This config with its named providers' keys read from `environ` (or their key
        files): call it where your app starts, its edge, with `os.environ`."""
        keys = provider_keys(load_providers(self.providers), environ)
        return dataclasses.replace(self, provider_keys=keys)

    @property
    def database_url(self) -> str:
        if isinstance(self.database, str):
            return self.database
        return str(self.database.conninfo)

    def settings(self) -> Settings:
        """The engine's `Settings` for these values, validated as the variables would be (a
        bad value is a SetupError naming its variable); nothing is read from the environment."""
        given: dict[str, Any] = {
            "DATABASE_URL": self.database_url,
            "OPENAI_BASE_URL": self.model_base_url,
            "OPENAI_API_KEY": self.model_api_key,
            "AGENTLEDGER_MODEL": self.model,
            "AGENTLEDGER_PROVIDERS": self.providers,
            "AGENTLEDGER_MODEL_PRICES": dict(self.model_prices),
            "AGENTLEDGER_SANDBOX": self.sandbox_image,
            "AGENTLEDGER_SANDBOX_LIMITS": self.sandbox_limits,
            "AGENTLEDGER_TASK_QUEUE": self.task_queue or TASK_QUEUE,
            "AGENTLEDGER_TENANT": self.tenant,
            "AGENTLEDGER_OTEL": self.telemetry,
            "AGENTLEDGER_OTEL_CAPTURE_CONTENT": self.telemetry_content,
            "AGENTLEDGER_ENCRYPTION_KEYS": dict(self.encryption_keys),
            "AGENTLEDGER_ENCRYPTION_KEY_ID": self.encryption_key_id
            or next(iter(self.encryption_keys), None),
            "AGENTLEDGER_SEARCH_ATTRIBUTES": self.search_attributes,
            "AGENTLEDGER_PAYLOAD_LIMIT_BYTES": self.payload_limit_bytes,
            "AGENTLEDGER_ARTIFACT_THRESHOLD_BYTES": self.artifact_threshold_bytes,
        }
        # `read` drops empty values as unset variables: a switch goes as "1" or "0".
        ours = Settings.read(
            {k: ("1" if v else "0") if isinstance(v, bool) else v for k, v in given.items()}
        )
        if self.base is None:
            return ours
        named = {_FIELD_BY_VARIABLE[variable] for variable in given}
        return self.base.model_copy(update={name: getattr(ours, name) for name in named})


_FIELD_BY_VARIABLE = {
    str(info.validation_alias): name
    for name, info in Settings.model_fields.items()
    if isinstance(info.validation_alias, str)
}
