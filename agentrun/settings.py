"""Settings from environment variables, falling back to the local embedded stack.

Every entry point reads settings through `Settings.load()`, so setting the variables moves
the same commands from the embedded stack to a real cluster, database and model provider.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from temporalio.envconfig import ClientConfigProfile

from agentrun.constants import DEFAULT_WEB_UI, OFFLINE_MODEL, TASK_QUEUE
from agentrun.temporal_connection import ConnectionSettingsError, load_profile

STACK_FILE = "stack.json"


class SetupError(Exception):
    """A service is missing or unreachable; the message says how to provide it."""


@dataclass(frozen=True)
class Settings:
    """Where Temporal, Postgres and the model live, and how the worker behaves."""

    temporal_address: str = "localhost:7233"
    temporal_namespace: str = "default"
    # API key, TLS, gRPC metadata: TEMPORAL_* or a TOML profile (agentrun.temporal_connection).
    temporal_profile: ClientConfigProfile | None = field(default=None, repr=False)
    task_queue: str = TASK_QUEUE
    # AGENTRUN_TENANT: commands see and touch only this tenant's runs (None: every tenant's).
    tenant: str | None = None
    # Secrets stay out of repr(), so a logged or printed Settings shows none of them.
    database_url: str | None = field(default=None, repr=False)  # its password
    openai_base_url: str | None = None
    openai_api_key: str = field(default="offline", repr=False)
    model: str = OFFLINE_MODEL
    web_ui_url: str = DEFAULT_WEB_UI
    home: Path = field(default_factory=lambda: Path(".agentrun"))
    artifact_threshold_bytes: int = 64 * 1024
    # Payloads over this many bytes fail at once (agentrun.payload_limits) instead of being
    # refused by Temporal (2 MB blob limit by default) and retried for ever.
    payload_limit_bytes: int = 1_900_000
    search_attributes: bool = True
    # USD per million tokens, by model name: {"model": [input, output]}.
    model_prices: dict[str, tuple[float, float]] = field(default_factory=dict)
    # "host:port" where worker processes serve Temporal SDK metrics for Prometheus; None: off.
    prometheus_bind: str | None = None
    # OpenTelemetry tracing of client calls, workflows and activities (needs the `otel` extra).
    otel: bool = False
    # The default age for `starter.py prune`; nothing is pruned unless that command runs.
    retention_days: float | None = None
    # AES-256 keys by key id (AGENTRUN_ENCRYPTION_KEYS); empty: payloads are not encrypted.
    # Old ids stay here after a rotation so history written under them still decodes.
    encryption_keys: dict[str, bytes] = field(default_factory=dict, repr=False)
    # The id new payloads are encrypted with (AGENTRUN_ENCRYPTION_KEY_ID; default the first).
    encryption_key_id: str | None = None

    @classmethod
    def load(cls, env: dict[str, str] | None = None) -> Settings:
        """Environment first, then the stack file that `starter.py up` writes, then defaults."""
        env = dict(os.environ if env is None else env)
        home = Path(env.get("AGENTRUN_HOME", ".agentrun"))
        stack = read_stack_file(home)
        try:
            profile = load_profile(env)
        except ConnectionSettingsError as err:
            raise SetupError(str(err)) from err
        keys, key_id = parse_encryption_keys(
            env.get("AGENTRUN_ENCRYPTION_KEYS", ""), env.get("AGENTRUN_ENCRYPTION_KEY_ID")
        )
        prices = {OFFLINE_MODEL: (0.15, 0.60)}
        if env.get("AGENTRUN_MODEL_PRICES"):
            raw = json.loads(env["AGENTRUN_MODEL_PRICES"])
            prices.update({name: (float(p[0]), float(p[1])) for name, p in raw.items()})
        return cls(
            temporal_address=profile.address or stack.get("temporal_address", "localhost:7233"),
            temporal_namespace=profile.namespace or "default",
            temporal_profile=profile,
            task_queue=env.get("AGENTRUN_TASK_QUEUE", TASK_QUEUE),
            tenant=env.get("AGENTRUN_TENANT") or None,
            database_url=env.get("DATABASE_URL") or stack.get("database_url"),
            openai_base_url=env.get("OPENAI_BASE_URL") or stack.get("openai_base_url"),
            openai_api_key=env.get("OPENAI_API_KEY", "offline"),
            model=env.get("AGENTRUN_MODEL", OFFLINE_MODEL),
            web_ui_url=env.get("AGENTRUN_WEB_UI") or stack.get("web_ui_url", DEFAULT_WEB_UI),
            home=home,
            artifact_threshold_bytes=int(env.get("AGENTRUN_ARTIFACT_THRESHOLD_BYTES", 64 * 1024)),
            payload_limit_bytes=int(env.get("AGENTRUN_PAYLOAD_LIMIT_BYTES", 1_900_000)),
            search_attributes=env.get("AGENTRUN_SEARCH_ATTRIBUTES", "1") != "0",
            model_prices=prices,
            prometheus_bind=env.get("AGENTRUN_PROMETHEUS_BIND") or None,
            otel=env.get("AGENTRUN_OTEL", "").strip().lower() in ("1", "true", "yes", "on"),
            retention_days=float(env["AGENTRUN_RETENTION_DAYS"])
            if env.get("AGENTRUN_RETENTION_DAYS")
            else None,
            encryption_keys=keys,
            encryption_key_id=key_id,
        )

    def require_database(self) -> str:
        if not self.database_url:
            raise SetupError(
                "No database configured: set DATABASE_URL, or start the local stack with "
                "`python starter.py up` (it records its database in .agentrun/stack.json)."
            )
        return self.database_url

    def run_link(self, run_id: str) -> str:
        return f"{self.web_ui_url}/namespaces/{self.temporal_namespace}/workflows/{run_id}"


ENCRYPTION_KEY_BYTES = 32


def parse_encryption_keys(
    raw: str, active_id: str | None = None
) -> tuple[dict[str, bytes], str | None]:
    """`id:base64key,id:base64key` (32-byte AES-256 keys) and the active id (default: the
    first); a malformed value is a SetupError that never echoes key material."""
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
    active = (active_id or "").strip() or None
    if not keys:
        if active:
            raise SetupError(
                f"AGENTRUN_ENCRYPTION_KEY_ID is {active!r} but AGENTRUN_ENCRYPTION_KEYS is empty"
            )
        return {}, None
    if active is None:
        active = next(iter(keys))
    elif active not in keys:
        raise SetupError(
            f"AGENTRUN_ENCRYPTION_KEY_ID {active!r} is not among the ids in "
            f"AGENTRUN_ENCRYPTION_KEYS ({', '.join(sorted(keys))})"
        )
    return keys, active


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
