"""Named model providers: where a model is called, with which key, headers and timeouts.

One worker serves agents on different providers: a profile's `model.provider` and its
`failures.fallback_provider` name one of the worker's providers (AGENTLEDGER_PROVIDERS), and a
run without a name uses the worker's default client (OPENAI_BASE_URL, OPENAI_API_KEY). Keys
are never written here: a provider names the environment variable or the file that holds it,
read where the configuration is built (`provider_keys`, at the edges: `agentledger-worker`,
`AgentLedgerConfig.provider_keys`), so the engine is handed keys and reads no variable.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator
from temporalio.exceptions import ApplicationError

from agentledger.core.errors import SetupError
from agentledger.core.spec import Strict
from agentledger.core.yaml_files import load_yaml

# The name a run's calls report (span, metrics) when it names no provider.
DEFAULT_PROVIDER = "default"


class Provider(Strict):
    """An OpenAI-compatible endpoint. Every field but `base_url` has a default."""

    base_url: str = Field(min_length=1, description="e.g. https://api.openai.com/v1")
    api_key_env: str | None = Field(None, description="the environment variable with the key")
    api_key_file: Path | None = Field(None, description="a file with the key (a mounted secret)")
    headers: dict[str, str] = Field(default_factory=dict, description="sent with every call")
    timeout_seconds: float | None = Field(
        None, gt=0, description="the most one call may take; None: the step's model_seconds"
    )
    connect_timeout_seconds: float = Field(10, gt=0)
    honour_retry_after: bool = Field(
        True, description="a 429's retry-after sets the next attempt's delay"
    )
    max_retry_after_seconds: float = Field(
        300, gt=0, description="a longer retry-after is cut to this"
    )
    system: str | None = Field(
        None,
        description="who serves it, as the GenAI conventions and the price table name it "
        "(openai, anthropic, ...); default: the provider's name",
    )

    @model_validator(mode="after")
    def _one_key_source(self) -> Provider:
        if self.api_key_env and self.api_key_file:
            raise ValueError("give api_key_env or api_key_file, not both")
        return self

    @field_validator("base_url")
    @classmethod
    def _an_http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("an http:// or https:// URL")
        return value.rstrip("/")


def load_providers(raw: str | None) -> dict[str, Provider]:
    """Providers by name from AGENTLEDGER_PROVIDERS: inline JSON (starts with `{`), else a YAML
    or JSON file, holding a mapping of name to provider (or `{providers: {...}}`)."""
    if not raw or not raw.strip():
        return {}
    text = raw.strip()
    where = "AGENTLEDGER_PROVIDERS"
    try:
        if text.startswith("{"):
            body: Any = json.loads(text)
        else:
            where = f"AGENTLEDGER_PROVIDERS ({text})"
            body = load_yaml(Path(text).read_text()) or {}
    except OSError as err:
        raise SetupError(f"{where}: cannot read the file: {err.strerror}") from err
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        raise SetupError(f"{where}: not valid JSON/YAML: {err}") from err
    if isinstance(body, dict) and isinstance(body.get("providers"), dict):
        body = body["providers"]
    if not isinstance(body, dict):
        raise SetupError(f"{where}: must be a mapping of provider name to its settings")
    providers: dict[str, Provider] = {}
    for name, fields in body.items():
        if str(name) == DEFAULT_PROVIDER:
            raise SetupError(f"{where}: {DEFAULT_PROVIDER!r} names the worker's own client")
        try:
            providers[str(name)] = Provider.model_validate(fields)
        except ValidationError as err:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'provider'}: {e['msg']}" for e in err.errors()
            )
            raise SetupError(f"{where}: provider {name!r}: {problems}") from err
    return providers


def provider_keys(providers: Mapping[str, Provider], environ: Mapping[str, str]) -> dict[str, str]:
    """Each provider's key, from its variable in `environ` or its file; a provider that
    names neither (a local server) has none. A key that cannot be read is a SetupError
    naming its provider, before any worker polls."""
    return {
        name: key
        for name, provider in providers.items()
        if (key := read_key(name, provider, environ)) is not None
    }


def read_key(name: str, provider: Provider, environ: Mapping[str, str]) -> str | None:
    if provider.api_key_env:
        key = environ.get(provider.api_key_env, "").strip()
        if not key:
            raise SetupError(
                f"model provider {name!r}: the environment variable {provider.api_key_env} "
                "that holds its key is not set"
            )
        return key
    if provider.api_key_file:
        try:
            key = provider.api_key_file.read_text().strip()
        except OSError as err:
            raise SetupError(
                f"model provider {name!r}: cannot read its key file "
                f"{provider.api_key_file}: {err.strerror}"
            ) from err
        if not key:
            raise SetupError(
                f"model provider {name!r}: its key file {provider.api_key_file} is empty"
            )
        return key
    return None


def with_retry_after_policy(failure: ApplicationError, provider: Provider) -> ApplicationError:
    """The failure with the provider's retry-after policy applied to its next attempt's
    delay: ignored when the provider's is not to be trusted, cut to its ceiling."""
    delay = failure.next_retry_delay
    if delay is None:
        return failure
    if not provider.honour_retry_after:
        delay = None
    elif delay.total_seconds() > provider.max_retry_after_seconds:
        delay = timedelta(seconds=provider.max_retry_after_seconds)
    else:
        return failure
    return ApplicationError(
        failure.message,
        *failure.details,
        type=failure.type,
        non_retryable=failure.non_retryable,
        next_retry_delay=delay,
    )
