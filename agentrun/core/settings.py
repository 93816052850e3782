"""Settings from environment variables, falling back to the local embedded stack.

Every entry point reads settings through `Settings.load()`, so setting the variables moves
the same commands from the embedded stack to a real cluster, database and model provider.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from pydantic import Field, SecretBytes, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict
from temporalio.envconfig import ClientConfigProfile

from agentrun.core.constants import (
    DEFAULT_TEMPORAL_ADDRESS,
    DEFAULT_WEB_UI,
    DEPLOYMENT_NAME,
    OFFLINE_MODEL,
    OFFLINE_MODEL_PRICE,
    TASK_QUEUE,
)
from agentrun.core.errors import ConnectionSettingsError, SetupError
from agentrun.core.temporal_connection import load_profile

STACK_FILE = "stack.json"
# Set while `Settings.load(env)` reads a given mapping instead of the process environment.
_GIVEN_ENV: ContextVar[bool] = ContextVar("given_env", default=False)


def env(name: str, default: Any = None, description: str = "") -> Any:
    """A setting read from the environment variable `name`."""
    return Field(default, validation_alias=name, description=description)


class Settings(BaseSettings):
    """Where Temporal, Postgres and the model live, and how the worker behaves.

    Each field names its environment variable once. Booleans take pydantic's one syntax
    (1/0, true/false, yes/no, on/off); an empty variable counts as unset. Secrets are
    SecretStr/SecretBytes or left out of repr(), so a logged Settings shows none of them.
    """

    model_config = SettingsConfigDict(
        frozen=True, env_ignore_empty=True, case_sensitive=True, extra="ignore"
    )

    # From TEMPORAL_* or a TOML profile, the temporal CLI's way (agentrun.core.temporal_connection).
    temporal_address: str = DEFAULT_TEMPORAL_ADDRESS
    temporal_namespace: str = "default"
    temporal_profile: ClientConfigProfile | None = Field(None, repr=False)

    task_queue: str = env("AGENTRUN_TASK_QUEUE", TASK_QUEUE)
    tenant: str | None = env(
        "AGENTRUN_TENANT", None, "commands see and touch only this tenant's runs (None: all)"
    )
    database_url: str | None = Field(
        None, validation_alias="DATABASE_URL", repr=False, description="holds its password"
    )
    openai_base_url: str | None = env("OPENAI_BASE_URL")
    openai_api_key: SecretStr = env("OPENAI_API_KEY", SecretStr("offline"))
    model: str = env("AGENTRUN_MODEL", OFFLINE_MODEL)
    web_ui_url: str = env("AGENTRUN_WEB_UI", DEFAULT_WEB_UI)
    home: Path = env("AGENTRUN_HOME", Path(".agentrun"), "data of the embedded stack")
    config_dir: Path | None = env(
        "AGENTRUN_CONFIG_DIR", None, "your approver keys; default ~/.config/agentrun"
    )
    artifact_threshold_bytes: int = env(
        "AGENTRUN_ARTIFACT_THRESHOLD_BYTES", 64 * 1024, "larger tool outputs become artifacts"
    )
    payload_limit_bytes: int = env(
        "AGENTRUN_PAYLOAD_LIMIT_BYTES",
        1_900_000,
        "larger payloads fail at once instead of being refused by Temporal (2 MB) for ever",
    )
    search_attributes: bool = env("AGENTRUN_SEARCH_ATTRIBUTES", True)
    model_prices: dict[str, tuple[float, float]] = env(
        "AGENTRUN_MODEL_PRICES",
        {OFFLINE_MODEL: OFFLINE_MODEL_PRICE},
        'USD per million tokens, JSON: {"model": [input, output]}',
    )
    prometheus_bind: str | None = env(
        "AGENTRUN_PROMETHEUS_BIND", None, "host:port where workers serve SDK metrics"
    )
    otel: bool = env("AGENTRUN_OTEL", False, "OpenTelemetry tracing (needs the `otel` extra)")
    retention_days: float | None = env(
        "AGENTRUN_RETENTION_DAYS", None, "the default age for `agentrun prune`"
    )
    # Old ids stay after a rotation so history written under them still decodes.
    encryption_keys: dict[str, SecretBytes] = env(
        "AGENTRUN_ENCRYPTION_KEYS", {}, "`id:base64key,...` AES-256 keys; empty: no encryption"
    )
    encryption_key_id: str | None = env(
        "AGENTRUN_ENCRYPTION_KEY_ID", None, "the id new payloads use (default the first)"
    )
    faults: str = env("AGENTRUN_FAULTS", "", "crash-test fault points (agentrun.core.faults)")
    zombie_seconds: float = env("AGENTRUN_ZOMBIE_SECONDS", 12.0, "how long `tool.zombie` hangs")
    # Worker Versioning: workers declare this version of the deployment, and every run stays
    # pinned to the version it started on.
    deployment_name: str = env("AGENTRUN_DEPLOYMENT_NAME", DEPLOYMENT_NAME)
    build_id: str | None = env("AGENTRUN_BUILD_ID", None, "None: unversioned workers")
    # What a worker serves and where a starter finds profiles, when no flag says (agentrun-worker
    # --tools/--mcp, agentrun start --agents).
    tools: str = env("AGENTRUN_TOOLS", "", "comma-separated `PKG.MODULE:ATTR` tool sources")
    mcp: str = env("AGENTRUN_MCP", "", "`;`-separated MCP servers")
    sandbox: str | None = env(
        "AGENTRUN_SANDBOX", None, "serve run_code in this Docker image (agentrun-worker --sandbox)"
    )
    sandbox_limits: str = env(
        "AGENTRUN_SANDBOX_LIMITS", "", "run_code's limits, e.g. seconds=60,memory_mb=512"
    )
    agents: str | None = env(
        "AGENTRUN_AGENTS", None, "agent profiles: a YAML file or PKG.MODULE:ATTR"
    )
    workflow_cache: int = env(
        "AGENTRUN_WORKFLOW_CACHE",
        1000,
        "runs a worker keeps in memory between steps; an evicted run replays its history",
    )
    gc_threshold: int = env(
        "AGENTRUN_GC_THRESHOLD",
        20_000,
        "allocations between a worker's young garbage collections; 0 keeps Python's own",
    )
    model_stream: bool = env(
        "AGENTRUN_MODEL_STREAM", True, "ask the provider to stream (live model text in `watch`)"
    )

    @field_validator("workflow_cache", "gc_threshold")
    @classmethod
    def _a_count_is_not_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError("a count: 0 or more")
        return value

    @field_validator("model_prices", mode="before")
    @classmethod
    def _prices_over_the_default(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = json.loads(value)
        return {OFFLINE_MODEL: OFFLINE_MODEL_PRICE, **value}

    @field_validator("encryption_keys", mode="before")
    @classmethod
    def _parse_keys(cls, value: Any) -> Any:
        return parse_encryption_keys(value) if isinstance(value, str) else value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,) if _GIVEN_ENV.get() else (init_settings, env_settings)

    @classmethod
    def load(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """The environment (or `environ`), then the stack file `agentrun up` writes, then
        the defaults. A value that does not parse is a SetupError naming its variable."""
        given = dict(os.environ if environ is None else environ)
        try:
            with _reading(environ):
                # A given mapping stands in for the environment, as init values by name.
                named: dict[str, Any] = {k: v for k, v in given.items() if v and k in _NAMES}
                read = cls(**named) if environ is not None else cls()
            profile = load_profile(given)
        except ValidationError as err:
            problems = "; ".join(f"{e['loc'][0]}: {e['msg']}" for e in err.errors())
            raise SetupError(f"invalid setting: {problems}") from err
        except ConnectionSettingsError as err:
            raise SetupError(str(err)) from err
        stack = read_stack_file(read.home)
        key_id = check_key_id(read.encryption_keys, read.encryption_key_id)
        return read.model_copy(
            update={
                "temporal_address": profile.address
                or stack.get("temporal_address", DEFAULT_TEMPORAL_ADDRESS),
                "temporal_namespace": profile.namespace or "default",
                "temporal_profile": profile,
                "database_url": read.database_url or stack.get("database_url"),
                "openai_base_url": read.openai_base_url or stack.get("openai_base_url"),
                "web_ui_url": read.web_ui_url
                if "web_ui_url" in read.model_fields_set
                else stack.get("web_ui_url", DEFAULT_WEB_UI),
                "encryption_key_id": key_id,
            }
        )

    def require_database(self) -> str:
        if not self.database_url:
            raise SetupError(
                "No database configured: set DATABASE_URL, or start the local stack with "
                "`agentrun up` (it records its database in .agentrun/stack.json)."
            )
        return self.database_url

    def run_link(self, run_id: str) -> str:
        return f"{self.web_ui_url}/namespaces/{self.temporal_namespace}/workflows/{run_id}"

    def encryption_key_material(self) -> dict[str, bytes]:
        """The AES keys by id, unwrapped for the codec and the vault alone."""
        return {key_id: key.get_secret_value() for key_id, key in self.encryption_keys.items()}


_NAMES = frozenset(
    field.validation_alias
    for field in Settings.model_fields.values()
    if isinstance(field.validation_alias, str)
)


@contextmanager
def _reading(environ: Mapping[str, str] | None) -> Iterator[None]:
    token = _GIVEN_ENV.set(environ is not None)
    try:
        yield
    finally:
        _GIVEN_ENV.reset(token)


ENCRYPTION_KEY_BYTES = 32


def parse_encryption_keys(raw: str) -> dict[str, bytes]:
    """`id:base64key,id:base64key` (32-byte AES-256 keys); a malformed value is a SetupError
    that never echoes key material."""
    keys: dict[str, bytes] = {}
    for entry in (part.strip() for part in raw.split(",")):
        if not entry:
            continue
        key_id, sep, encoded = entry.partition(":")
        key_id = key_id.strip()
        if not sep or not key_id:
            raise SetupError(
                "AGENTRUN_ENCRYPTION_KEYS must be comma-separated `id:base64key` pairs; "
                'generate a key with `python -c "import os, base64; '
                'print(base64.b64encode(os.urandom(32)).decode())"`'
            )
        try:
            key = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError) as err:
            raise SetupError(
                f"AGENTRUN_ENCRYPTION_KEYS: the key for id {key_id!r} is not valid base64"
            ) from err
        if len(key) != ENCRYPTION_KEY_BYTES:
            raise SetupError(
                f"AGENTRUN_ENCRYPTION_KEYS: the key for id {key_id!r} is {len(key)} bytes; "
                f"AES-256 needs {ENCRYPTION_KEY_BYTES}"
            )
        if key_id in keys:
            raise SetupError(f"AGENTRUN_ENCRYPTION_KEYS: key id {key_id!r} appears twice")
        keys[key_id] = key
    return keys


def check_key_id(keys: Mapping[str, object], active_id: str | None) -> str | None:
    """The id new payloads are encrypted with: AGENTRUN_ENCRYPTION_KEY_ID, else the first."""
    active = (active_id or "").strip() or None
    if not keys:
        if active:
            raise SetupError(
                f"AGENTRUN_ENCRYPTION_KEY_ID is {active!r} but AGENTRUN_ENCRYPTION_KEYS is empty"
            )
        return None
    if active is None:
        return next(iter(keys))
    if active not in keys:
        raise SetupError(
            f"AGENTRUN_ENCRYPTION_KEY_ID {active!r} is not among the ids in "
            f"AGENTRUN_ENCRYPTION_KEYS ({', '.join(sorted(keys))})"
        )
    return active


def read_stack_file(home: Path) -> dict[str, str]:
    path = home / STACK_FILE
    if not path.exists():
        return {}
    return dict(json.loads(path.read_text()))


def write_stack_file(home: Path, endpoints: dict[str, str]) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    path = home / STACK_FILE
    path.write_text(json.dumps(endpoints, indent=2))
    return path
