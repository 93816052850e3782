"""`agentledger.AgentLedgerConfig`: everything agentledger is configured by, one typed object.

A program builds it (`AgentLedgerConfig(database_url=..., tools=[...])`, an app's own),
or an edge reads it from the environment once (`AgentLedgerConfig.load()`: the `agentledger`
command, `agentledger-worker`, `agentledger up`), and hands it down; nothing under the edges
reads a variable, and nothing turns the object back into variables. Each field names its
environment variable once. Setting the variables moves the same commands from the embedded
stack to a real cluster, database and model provider. A `.env` file in the current folder is
read as pydantic-settings reads one (the process's variables win), and an `AGENTLEDGER_`
variable no field has is warned about, with the name it most resembles.
"""

from __future__ import annotations

import base64
import binascii
import difflib
import json
import logging
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
from dotenv import dotenv_values
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool
from pydantic import (
    Field,
    PrivateAttr,
    SecretBytes,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import SettingsConfigDict
from temporalio.envconfig import ClientConfigProfile

from agentledger.core.config_base import ConfigBase, env
from agentledger.core.constants import (
    DEFAULT_TEMPORAL_ADDRESS,
    DEFAULT_WEB_UI,
    DEPLOYMENT_NAME,
    OFFLINE_MODEL,
    OFFLINE_MODEL_PRICE,
    TASK_QUEUE,
)
from agentledger.core.errors import ConnectionSettingsError, SetupError
from agentledger.core.http_config import HTTP_NAMES, HttpConfig
from agentledger.core.log_setup import LogFormat, LogLevel
from agentledger.core.sandbox_limits import SandboxLimits
from agentledger.core.temporal_connection import connect_options, load_profile

STACK_FILE = "stack.json"
DOTENV_FILE = ".env"

log = logging.getLogger(__name__)


class AgentLedgerConfig(ConfigBase):
    """Where Temporal, Postgres and the model live, what the engine serves, and how the
    worker and the HTTP server behave.

    Each field names its environment variable once (a field without one is a program's to
    set: an open pool, tool objects, providers' keys read at the program's edge). Booleans
    take pydantic's one syntax (1/0, true/false, yes/no, on/off); an empty variable counts as
    unset. Secrets are SecretStr/SecretBytes or left out of repr(), so a logged config shows
    none of them.
    """

    model_config = SettingsConfigDict(
        frozen=True,
        case_sensitive=True,
        extra="forbid",
        populate_by_name=True,
        arbitrary_types_allowed=True,
    )

    # From TEMPORAL_* or a TOML profile, the temporal CLI's way
    # (agentledger.core.temporal_connection).
    temporal_address: str = DEFAULT_TEMPORAL_ADDRESS
    temporal_namespace: str = "default"
    temporal_profile: ClientConfigProfile | None = Field(None, repr=False)

    task_queue: str = env("AGENTLEDGER_TASK_QUEUE", TASK_QUEUE)
    tenant: str | None = env(
        "AGENTLEDGER_TENANT", None, "commands see and touch only this tenant's runs (None: all)"
    )
    database_url: str | None = Field(
        None, validation_alias="DATABASE_URL", repr=False, description="holds its password"
    )
    openai_base_url: str | None = env("OPENAI_BASE_URL")
    openai_api_key: SecretStr = env("OPENAI_API_KEY", SecretStr("offline"))
    model: str = env("AGENTLEDGER_MODEL", OFFLINE_MODEL)
    web_ui_url: str = env("AGENTLEDGER_WEB_UI", DEFAULT_WEB_UI)
    public_url: str | None = env(
        "AGENTLEDGER_PUBLIC_URL",
        None,
        "the HTTP door's address as people reach it (https://agents.example.com): "
        "notifications link to the inbox there",
    )
    home: Path = env("AGENTLEDGER_HOME", Path(".agentledger"), "data of the embedded stack")
    config_dir: Path | None = env(
        "AGENTLEDGER_CONFIG_DIR", None, "your approver keys; default ~/.config/agentledger"
    )
    artifact_threshold_bytes: int = env(
        "AGENTLEDGER_ARTIFACT_THRESHOLD_BYTES", 64 * 1024, "larger tool outputs become artifacts"
    )
    payload_limit_bytes: int = env(
        "AGENTLEDGER_PAYLOAD_LIMIT_BYTES",
        1_900_000,
        "larger payloads fail at once instead of being refused by Temporal (2 MB) for ever",
    )
    search_attributes: bool = env("AGENTLEDGER_SEARCH_ATTRIBUTES", True)
    model_prices: dict[str, tuple[float, float]] = env(
        "AGENTLEDGER_MODEL_PRICES",
        {OFFLINE_MODEL: OFFLINE_MODEL_PRICE},
        'USD per million tokens, JSON: {"model": [input, output]}',
    )
    prometheus_bind: str | None = env(
        "AGENTLEDGER_PROMETHEUS_BIND", None, "host:port where workers serve SDK metrics"
    )
    otel: bool = env("AGENTLEDGER_OTEL", False, "OpenTelemetry tracing (needs the `otel` extra)")
    retention_days: float | None = env(
        "AGENTLEDGER_RETENTION_DAYS", None, "the default age for `agentledger prune`"
    )
    # Old ids stay after a rotation so history written under them still decodes.
    encryption_keys: dict[str, SecretBytes] = env(
        "AGENTLEDGER_ENCRYPTION_KEYS", {}, "`id:base64key,...` AES-256 keys; empty: no encryption"
    )
    encryption_key_id: str | None = env(
        "AGENTLEDGER_ENCRYPTION_KEY_ID", None, "the id new payloads use (default the first)"
    )
    # A codec of the user's own (their app's PayloadCodec), for commands that read payloads
    # the user's app sealed: it replaces agentledger's encryption.
    codec: str | None = env(
        "AGENTLEDGER_CODEC", None, "`PKG.MODULE:ATTR`: a PayloadCodec, or what makes one"
    )
    codec_endpoint: str | None = env(
        "AGENTLEDGER_CODEC_ENDPOINT",
        None,
        "a codec server's URL (as the temporal CLI's --codec-endpoint)",
    )
    # Worker Versioning: workers declare this version of the deployment, and every run stays
    # pinned to the version it started on.
    deployment_name: str = env("AGENTLEDGER_DEPLOYMENT_NAME", DEPLOYMENT_NAME)
    build_id: str | None = env("AGENTLEDGER_BUILD_ID", None, "None: unversioned workers")
    # What a worker serves and where a starter finds profiles, when no flag says (agentledger-worker
    # --tools/--mcp, agentledger start --agents).
    tools: tuple[Any, ...] = env(
        "AGENTLEDGER_TOOLS",
        (),
        "the tools runs may call: registries, tools, or `PKG.MODULE:ATTR` references (a "
        "variable: comma-separated references)",
    )
    mcp: str = env("AGENTLEDGER_MCP", "", "`;`-separated MCP servers")
    sandbox: str | None = env(
        "AGENTLEDGER_SANDBOX",
        None,
        "serve run_code in this Docker image (agentledger-worker --sandbox)",
    )
    sandbox_limits: str = env(
        "AGENTLEDGER_SANDBOX_LIMITS", "", "run_code's limits, e.g. seconds=60,memory_mb=512"
    )
    agents: str | None = env(
        "AGENTLEDGER_AGENTS", None, "agent profiles: a YAML file or PKG.MODULE:ATTR"
    )
    workflow_cache: int = env(
        "AGENTLEDGER_WORKFLOW_CACHE",
        1000,
        "runs a worker keeps in memory between steps; an evicted run replays its history",
    )
    drain_seconds: float = env(
        "AGENTLEDGER_DRAIN_SECONDS",
        30.0,
        "how long a stopping worker lets its steps in hand finish before cancelling them",
    )
    gc_threshold: int = env(
        "AGENTLEDGER_GC_THRESHOLD",
        20_000,
        "allocations between a worker's young garbage collections; 0 keeps Python's own",
    )
    prepared_statements: bool = env(
        "AGENTLEDGER_PREPARED_STATEMENTS",
        True,
        "server-side prepared statements; 0 behind PgBouncer in transaction mode",
    )
    model_stream: bool = env(
        "AGENTLEDGER_MODEL_STREAM", True, "ask the provider to stream (live model text in `watch`)"
    )
    # Production: agent traces and named providers.
    otel_capture_content: bool = env(
        "AGENTLEDGER_OTEL_CAPTURE_CONTENT",
        False,
        "agent spans carry prompts, answers, tool arguments and results (users' data)",
    )
    providers: str | None = env(
        "AGENTLEDGER_PROVIDERS",
        None,
        "named model providers: a YAML/JSON file, or inline JSON (agentledger.core.providers)",
    )
    # Read by agentledger's own commands (agentledger.core.log_setup); `--log-level` overrides.
    log_level: LogLevel = env("AGENTLEDGER_LOG_LEVEL", "INFO", "what agentledger logs, on stderr")
    log_format: LogFormat = env(
        "AGENTLEDGER_LOG_FORMAT", "text", "`json`: one JSON object per log line, for log pipelines"
    )
    # The HTTP server's own (`agentledger serve`), from AGENTLEDGER_HTTP_* and
    # AGENTLEDGER_OIDC_*.
    http: HttpConfig = Field(default_factory=HttpConfig)

    # A program's to set (the edges set them from their flags), never a variable's.
    # The mirror as an open pool the program owns (its URL then comes from it); without one,
    # the plugin opens, migrates and closes a pool for `database_url`.
    pool: AsyncConnectionPool | None = Field(None, repr=False, exclude=True)
    # The demo's tools served beside `tools` (agentledger-worker --demo).
    demo: bool = False
    # The one task queue the plugin registers the engine on; None: every worker it is on.
    engine_queue: str | None = None
    # The run queue's model-call and mirror queues served from the same process (False:
    # another worker, e.g. agentledger-worker, serves them).
    side_queues: bool = True
    # Named providers' keys by provider name, read where the program starts
    # (`with_provider_keys(os.environ)`): a provider's `api_key_env` is read there, not here.
    provider_keys: Mapping[str, str] = Field(default_factory=dict, repr=False, exclude=True)

    @model_validator(mode="after")
    def _the_pools_url(self) -> AgentLedgerConfig:
        """A program that hands over its pool names the database by it."""
        if self.pool is not None and not self.database_url:
            object.__setattr__(self, "database_url", str(self.pool.conninfo))
        return self

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_in_any_case(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("workflow_cache", "gc_threshold", "artifact_threshold_bytes")
    @classmethod
    def _a_count_is_not_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError("a count: 0 or more")
        return value

    @field_validator("payload_limit_bytes")
    @classmethod
    def _a_limit_is_positive(cls, value: int) -> int:
        if value <= 0:
            raise ValueError("a number of bytes: 1 or more")
        return value

    @field_validator("retention_days", "drain_seconds")
    @classmethod
    def _a_duration_is_positive(cls, value: float | None) -> float | None:
        if value is not None and not (value >= 0 and math.isfinite(value)):
            raise ValueError("a duration: 0 or more")
        return value

    @field_validator("model_prices", mode="before")
    @classmethod
    def _prices_over_the_default(cls, value: Any) -> Any:
        return {OFFLINE_MODEL: OFFLINE_MODEL_PRICE, **parse_model_prices(value)}

    @field_validator("sandbox_limits")
    @classmethod
    def _limits_that_parse(cls, value: str) -> str:
        try:
            SandboxLimits.parse(value)
        except SetupError as err:
            raise ValueError(str(err)) from err
        return value

    @field_validator("providers")
    @classmethod
    def _providers_that_load(cls, value: str | None) -> str | None:
        from agentledger.core.providers import load_providers  # pure: a file read at most

        try:
            load_providers(value)
        except SetupError as err:
            raise ValueError(str(err).removeprefix("AGENTLEDGER_PROVIDERS").lstrip(": ")) from err
        return value

    @field_validator("encryption_keys", mode="before")
    @classmethod
    def _parse_keys(cls, value: Any) -> Any:
        return parse_encryption_keys(value) if isinstance(value, str) else value

    @field_validator("codec")
    @classmethod
    def _a_reference(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[\w.]+:[\w.]+", value):
            raise ValueError("expected PKG.MODULE:ATTR (a PayloadCodec, or what makes one)")
        return value

    @field_validator("openai_base_url", "web_ui_url", "codec_endpoint", "public_url")
    @classmethod
    def _an_http_url(cls, value: str | None) -> str | None:
        if value is not None:
            parts = urlsplit(value)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError("expected an http:// or https:// URL with a host")
        return value

    @field_validator("database_url")
    @classmethod
    def _a_connection_string(cls, value: str | None) -> str | None:
        if value is not None:
            check_database_url(value)
        return value

    @field_validator("prometheus_bind")
    @classmethod
    def _host_and_port(cls, value: str | None) -> str | None:
        if value is not None:
            host, _, port = value.rpartition(":")
            if not host or not _is_port(port):
                raise ValueError("expected HOST:PORT, e.g. 0.0.0.0:9464")
        return value

    @field_validator("home", "config_dir")
    @classmethod
    def _a_folder(cls, value: Path | None) -> Path | None:
        if value is not None and value.exists() and not value.is_dir():
            raise ValueError(f"{value} is a file, not a folder")
        return value

    @field_validator("tenant")
    @classmethod
    def _a_tenant_name(cls, value: str | None) -> str | None:
        if value is not None and not 0 < len(value.strip()) <= 200:
            raise ValueError("a tenant name: 1 to 200 characters")
        return value

    @field_validator("tools", mode="before")
    @classmethod
    def _tool_references(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = tuple(part.strip() for part in value.split(",") if part.strip())
        for reference in value if isinstance(value, list | tuple) else ():
            if isinstance(reference, str):
                module, sep, attr = reference.partition(":")
                if not sep or not module or not attr:
                    raise ValueError(
                        f"{reference!r}: expected PKG.MODULE:ATTR, e.g. my_tools:registry"
                    )
        return value

    @field_validator("agents")
    @classmethod
    def _agent_profiles(cls, value: str | None) -> str | None:
        if value is not None:
            path = Path(value)
            reference = value.partition(":")
            is_file = path.suffix.lower() in (".yaml", ".yml", ".json") or path.is_file()
            if not is_file and not (reference[1] and reference[0] and reference[2]):
                raise ValueError(f"{value!r}: expected a YAML or JSON file, or PKG.MODULE:ATTR")
        return value

    @field_validator("mcp")
    @classmethod
    def _mcp_servers(cls, value: str) -> str:
        for server in (p.strip() for line in value.splitlines() for p in line.split(";")):
            name, sep, target = server.partition("=")
            if server and (not sep or not name.strip() or not target.strip()):
                raise ValueError(f"{server!r}: expected NAME=COMMAND ARGS... or NAME=https://...")
        return value

    @classmethod
    def read(cls, environ: Mapping[str, str] | None = None) -> AgentLedgerConfig:
        """The variables alone (the environment, or `environ`): no stack file, no Temporal
        profile. An empty variable counts as unset; a value that does not parse is a
        SetupError of one line naming its variable."""
        given = process_environment() if environ is None else environ
        named: dict[str, Any] = {k: v for k, v in given.items() if v and k in _NAMES}
        http = HttpConfig.read(given)
        try:
            read = cls(**named, http=http)
        except ValidationError as err:
            raise SetupError(f"invalid setting: {describe_problems(err)}") from err
        read._named = frozenset(read.model_fields_set)
        return read

    @classmethod
    def load(cls, environ: Mapping[str, str] | None = None) -> AgentLedgerConfig:
        """The environment (or `environ`), then the stack file `agentledger up` writes, then
        the defaults: what an edge reads once. A value that does not parse is a SetupError
        naming its variable."""
        given = dict(process_environment() if environ is None else environ)
        warn_unknown_variables(given)
        read = cls.read(given)
        try:
            profile = load_profile(given)
            check_temporal_variables(given, profile.address)
            connect_options(profile)  # reads the TLS files: a missing one is named now
        except ConnectionSettingsError as err:
            raise SetupError(str(err)) from err
        key_id = check_key_id(read.encryption_keys, read.encryption_key_id)
        configured = read.model_copy(
            update={
                "temporal_namespace": profile.namespace or "default",
                "temporal_profile": profile,
                "encryption_key_id": key_id,
                "config_dir": read.config_dir or user_config_dir(given),
            }
        )
        return configured.with_stack()

    def with_stack(self) -> AgentLedgerConfig:
        """This config with the stack file `agentledger up` writes (in `home`) where the
        environment named nothing: the local stack's addresses, read again once it started,
        without reading the environment again."""
        stack = read_stack_file(self.home)
        named = self._named
        profile = self.temporal_profile
        return self.model_copy(
            update={
                "temporal_address": (profile.address if profile else None)
                or stack.get("temporal_address", DEFAULT_TEMPORAL_ADDRESS),
                "database_url": self.database_url
                if "database_url" in named or self.pool is not None
                else stack.get("database_url"),
                "openai_base_url": self.openai_base_url
                if "openai_base_url" in named
                else stack.get("openai_base_url"),
                "web_ui_url": self.web_ui_url
                if "web_ui_url" in named
                else stack.get("web_ui_url", DEFAULT_WEB_UI),
            }
        )

    def with_provider_keys(self, environ: Mapping[str, str]) -> AgentLedgerConfig:
        """This config with its named providers' keys read from `environ` (or their key
        files): call it where your program starts, its edge, with `os.environ`."""
        from agentledger.core.providers import load_providers, provider_keys

        keys = provider_keys(load_providers(self.providers), environ)
        return self.model_copy(update={"provider_keys": keys})

    # The fields the environment named (`read`): the stack file fills the rest (`with_stack`).
    _named: frozenset[str] = PrivateAttr(default=frozenset())

    def require_database(self) -> str:
        if not self.database_url:
            raise SetupError(
                "No database configured: set DATABASE_URL, or start the local stack with "
                "`agentledger up` (it records its database in .agentledger/stack.json)."
            )
        return self.database_url

    def client_connect_config(self) -> dict[str, Any]:
        """`Client.connect`'s arguments for the Temporal server this config names (address,
        namespace, TLS or API key), as `temporalio.envconfig` gives them:
        `Client.connect(**config.client_connect_config(), plugins=[AgentLedgerPlugin(config)])`;
        the plugin brings the data converter."""
        try:
            options = connect_options(self.temporal_profile)
        except ConnectionSettingsError as err:
            raise SetupError(str(err)) from err
        return {
            "target_host": self.temporal_address,
            "namespace": self.temporal_namespace,
            **options,
        }

    def run_link(self, run_id: str) -> str:
        return f"{self.web_ui_url}/namespaces/{self.temporal_namespace}/workflows/{run_id}"

    def shown(self) -> dict[str, str]:
        """Each variable and the value in effect, secrets hidden (`agentledger settings`)."""
        options = connect_options(self.temporal_profile)
        tls = options.get("tls", False)
        shown = {
            "TEMPORAL_ADDRESS": self.temporal_address,
            "TEMPORAL_NAMESPACE": self.temporal_namespace,
            "TEMPORAL_TLS": "off"
            if tls is False
            else "on, client certificate"
            if getattr(tls, "client_cert", None)
            else "on",
            "TEMPORAL_API_KEY": "<set>" if options.get("api_key") else "",
        }
        for name, field in AgentLedgerConfig.model_fields.items():
            if isinstance(field.validation_alias, str):
                shown[field.validation_alias] = _shown_value(name, getattr(self, name))
        return shown

    def encryption_key_material(self) -> dict[str, bytes]:
        """The AES keys by id, unwrapped for the codec and the vault alone."""
        return {key_id: key.get_secret_value() for key_id, key in self.encryption_keys.items()}


_NAMES = frozenset(
    field.validation_alias
    for field in AgentLedgerConfig.model_fields.values()
    if isinstance(field.validation_alias, str)
)


# AGENTLEDGER_ variables read where no setting is: by the test suite, and by the chaos suite's
# faulty worker (chaos.faulty_worker), alone.
_TEST_ONLY = frozenset(
    {
        "AGENTLEDGER_CHROMIUM",
        "AGENTLEDGER_FAULTS",
        "AGENTLEDGER_RECORD_HISTORIES",
        "AGENTLEDGER_SCREENSHOT",
        "AGENTLEDGER_TEST_DATABASE_URL",
        "AGENTLEDGER_ZOMBIE_SECONDS",
    }
)


# AGENTLEDGER_ variables docker-compose.yml reads (its ports, bind address and passwords), which
# a user sets in the same environment or `.env`: not settings, and not misspelt ones.
_COMPOSE_ONLY = frozenset(
    {
        "AGENTLEDGER_BIND",
        "AGENTLEDGER_JAEGER_PORT",
        "AGENTLEDGER_METRICS_PORT",
        "AGENTLEDGER_MODEL_PORT",
        "AGENTLEDGER_OTLP_GRPC_PORT",
        "AGENTLEDGER_OTLP_HTTP_PORT",
        "AGENTLEDGER_PG_PASSWORD",
        "AGENTLEDGER_PG_PORT",
        "AGENTLEDGER_TEMPORAL_PG_PASSWORD",
        "AGENTLEDGER_TEMPORAL_PORT",
        "AGENTLEDGER_UI_PORT",
    }
)
# The HTTP server's group, `http` (agentledger.core.http_config).
_NOT_SETTINGS = _TEST_ONLY | _COMPOSE_ONLY | HTTP_NAMES


def process_environment() -> dict[str, str]:
    """The process's variables over those of `.env` in the current folder (a file of
    `NAME=value` lines, as pydantic-settings and python-dotenv read it); empty if absent."""
    dotenv = dotenv_values(DOTENV_FILE) if Path(DOTENV_FILE).is_file() else {}
    return {**{k: v for k, v in dotenv.items() if v is not None}, **os.environ}


# The prefix of the project's first name (agentrun): such a variable is named with its
# new name, not silently left unread.
_FORMER_PREFIX = "AGENTRUN_"


def user_config_dir(environ: Mapping[str, str]) -> Path:
    """Where a user's approver keys live when AGENTLEDGER_CONFIG_DIR names no folder: the XDG
    base directory's `agentledger` (`~/.config/agentledger` by default)."""
    base = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "agentledger"


def warn_unknown_variables(environ: Mapping[str, str]) -> None:
    """Warn of each AGENTLEDGER_ variable no setting reads, and each AGENTRUN_ one: a misspelt
    or former name is otherwise a setting silently left at its default."""
    for name in sorted(environ):
        if name.startswith(_FORMER_PREFIX):
            renamed = "AGENTLEDGER_" + name.removeprefix(_FORMER_PREFIX)
            known = renamed in _NAMES or renamed in _NOT_SETTINGS
            log.warning(
                "%s is not read (agentledger's variables begin AGENTLEDGER_)%s",
                name,
                f": set {renamed} instead" if known else "",
            )
        elif name.startswith("AGENTLEDGER_") and name not in _NAMES and name not in _NOT_SETTINGS:
            closest = difflib.get_close_matches(name, sorted(_NAMES), n=1)
            hint = f"; did you mean {closest[0]}?" if closest else " (`agentledger settings`)"
            log.warning(
                "%s is not a setting agentledger reads, so it changes nothing%s", name, hint
            )


def describe_problems(err: ValidationError) -> str:
    """pydantic's errors as `VARIABLE: problem; ...`, without the values (some are secrets)."""
    return "; ".join(
        f"{e['loc'][0]}: {e['msg'].removeprefix('Value error, ')}" for e in err.errors()
    )


def _shown_value(name: str, value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):  # as the README's table writes them
        return "1" if value else "0"
    if name == "encryption_keys":
        return ",".join(f"{key_id}:<key>" for key_id in value)
    if name == "database_url":
        return " ".join(
            f"{k}={'<set>' if k == 'password' else v}" for k, v in conninfo_to_dict(value).items()
        )
    if isinstance(value, SecretStr | SecretBytes):
        return "<set>"
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, tuple):  # tool sources: references, as the variable lists them
        return ", ".join(str(each) for each in value)
    return str(value)


def _is_port(raw: str) -> bool:
    return raw.isdigit() and 0 < int(raw) < 65536


_BOOLEAN_WORDS = frozenset({"1", "0", "true", "false", "yes", "no", "on", "off"})


def check_temporal_variables(env: Mapping[str, str], address: str | None) -> None:
    """What `temporalio.envconfig` takes without a word: an address with no port, and
    TEMPORAL_TLS=maybe (which it reads as on)."""
    if address:
        host, _, port = address.rpartition(":")
        if not host or not _is_port(port):
            raise SetupError(
                f"invalid setting: TEMPORAL_ADDRESS: expected HOST:PORT, e.g. "
                f"{DEFAULT_TEMPORAL_ADDRESS} (got {address!r})"
            )
    tls = env.get("TEMPORAL_TLS", "").strip().lower()
    if tls and tls not in _BOOLEAN_WORDS:
        raise SetupError("invalid setting: TEMPORAL_TLS: expected true or false")


def check_database_url(url: str) -> None:
    """A libpq connection string (URL or key=value pairs) that parses, with numeric ports;
    the message never repeats a password."""
    hint = (
        "expected postgresql://USER:PASSWORD@HOST:PORT/DBNAME (libpq parameters such as "
        "?sslmode=verify-full may follow) or libpq key=value pairs"
    )
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError as err:
        detail = "" if "@" in url or "password" in url else f" ({str(err).strip()})"
        raise ValueError(f"malformed{detail}; {hint}") from None
    ports = str(params.get("port", "")).split(",")
    if any(port and not _is_port(port) for port in ports):
        raise ValueError(f"malformed (the port is not a number); {hint}")


def parse_model_prices(value: Any) -> dict[str, tuple[float, float]]:
    """AGENTLEDGER_MODEL_PRICES: `{"model": [usd per 1M input tokens, per 1M output]}`."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as err:
            raise ValueError(f"not JSON ({err.msg} at character {err.pos})") from None
    shape = 'expected a JSON object {"model": [usd per 1M input, usd per 1M output]}'
    if not isinstance(value, Mapping):
        raise ValueError(shape)
    prices: dict[str, tuple[float, float]] = {}
    for model, pair in value.items():
        if (
            not isinstance(pair, list | tuple)
            or len(pair) != 2
            or not all(
                isinstance(p, int | float) and not isinstance(p, bool) and 0 <= p < math.inf
                for p in pair
            )
        ):
            raise ValueError(f"{shape}; the price of {model!r} is not two numbers 0 or more")
        prices[str(model)] = (float(pair[0]), float(pair[1]))
    return prices


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
                "AGENTLEDGER_ENCRYPTION_KEYS must be comma-separated `id:base64key` pairs; "
                'generate a key with `python -c "import os, base64; '
                'print(base64.b64encode(os.urandom(32)).decode())"`'
            )
        try:
            key = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError) as err:
            raise SetupError(
                f"AGENTLEDGER_ENCRYPTION_KEYS: the key for id {key_id!r} is not valid base64"
            ) from err
        if len(key) != ENCRYPTION_KEY_BYTES:
            raise SetupError(
                f"AGENTLEDGER_ENCRYPTION_KEYS: the key for id {key_id!r} is {len(key)} bytes; "
                f"AES-256 needs {ENCRYPTION_KEY_BYTES}"
            )
        if key_id in keys:
            raise SetupError(f"AGENTLEDGER_ENCRYPTION_KEYS: key id {key_id!r} appears twice")
        keys[key_id] = key
    return keys


def check_key_id(keys: Mapping[str, object], active_id: str | None) -> str | None:
    """The id new payloads are encrypted with: AGENTLEDGER_ENCRYPTION_KEY_ID, else the first."""
    active = (active_id or "").strip() or None
    if not keys:
        if active:
            raise SetupError(
                f"AGENTLEDGER_ENCRYPTION_KEY_ID is {active!r} but AGENTLEDGER_ENCRYPTION_KEYS "
                "is empty"
            )
        return None
    if active is None:
        return next(iter(keys))
    if active not in keys:
        raise SetupError(
            f"AGENTLEDGER_ENCRYPTION_KEY_ID {active!r} is not among the ids in "
            f"AGENTLEDGER_ENCRYPTION_KEYS ({', '.join(sorted(keys))})"
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
