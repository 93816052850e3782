"""The worker's model clients: its default one and one per named provider.

Built once, when the worker starts, with the keys its edge read (agentledger.core.providers.
provider_keys): a missing key stops the worker with the provider's name, rather than failing
runs one call at a time. Every client has
`max_retries=0`: Temporal owns retries.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import openai
from temporalio.exceptions import ApplicationError

from agentledger.core.config import AgentLedgerConfig
from agentledger.core.errors import BAD_REQUEST, SetupError
from agentledger.core.providers import DEFAULT_PROVIDER, Provider

OPENAI_HOST = "api.openai.com"


@dataclass(frozen=True)
class ModelEndpoint:
    """A client and what the run's spans and prices say about it."""

    name: str
    client: openai.AsyncOpenAI
    provider: Provider | None = None  # None: the worker's default client

    @property
    def system(self) -> str:
        """Who serves the calls (`gen_ai.provider.name`): the provider's `system` or name;
        for the default client, openai when it calls OpenAI, else the server's host."""
        if self.provider is None:
            return "openai" if self.host == OPENAI_HOST else self.host
        return self.provider.system or self.name

    @property
    def host(self) -> str:
        return str(self.client.base_url.host)

    @property
    def port(self) -> int | None:
        return self.client.base_url.port

    @property
    def price_provider(self) -> str | None:
        """The provider the price table looks the model up under; None: the model's usual one."""
        if self.provider is None:
            return "openai" if self.host == OPENAI_HOST else None
        return self.provider.system or self.name

    def timeout(self, step_seconds: float) -> float:
        if self.provider is None or self.provider.timeout_seconds is None:
            return step_seconds
        return min(step_seconds, self.provider.timeout_seconds)


def model_client(settings: AgentLedgerConfig) -> openai.AsyncOpenAI:
    api_key = settings.openai_api_key.get_secret_value()
    if not settings.openai_base_url and api_key == "offline":
        raise SetupError(
            "No model configured: set OPENAI_API_KEY (and OPENAI_BASE_URL for a non-OpenAI "
            "endpoint), or start the local stack with `agentledger up`."
        )
    # Temporal owns retries: the SDK must not retry underneath it.
    return openai.AsyncOpenAI(base_url=settings.openai_base_url, api_key=api_key, max_retries=0)


class ProviderClients:
    """Model clients by provider name; None (a run that names none) is the default one."""

    def __init__(
        self,
        default: openai.AsyncOpenAI,
        providers: Mapping[str, Provider] | None = None,
        keys: Mapping[str, str] | None = None,
    ) -> None:
        self.default = ModelEndpoint(DEFAULT_PROVIDER, default)
        self.named = {
            name: ModelEndpoint(name, client_for(name, provider, keys or {}), provider)
            for name, provider in (providers or {}).items()
        }

    def get(self, name: str | None) -> ModelEndpoint:
        if name is None or name == DEFAULT_PROVIDER:
            return self.default
        try:
            return self.named[name]
        except KeyError:
            known = ", ".join(sorted(self.named)) or "none (AGENTLEDGER_PROVIDERS is unset)"
            # No retry finds a provider this worker was not given.
            raise ApplicationError(
                f"no model provider named {name!r} on this worker; it has: {known}",
                type=BAD_REQUEST,
                non_retryable=True,
            ) from None


def client_for(name: str, provider: Provider, keys: Mapping[str, str]) -> openai.AsyncOpenAI:
    needs_key = provider.api_key_env or provider.api_key_file
    if needs_key and name not in keys:
        raise SetupError(
            f"model provider {name!r} takes a key, and none was given: set "
            f"{provider.api_key_env or 'its key file'} where the worker starts, or pass "
            "AgentLedgerConfig.with_provider_keys(os.environ) where your app starts"
        )
    return openai.AsyncOpenAI(
        base_url=provider.base_url,
        # vLLM and Ollama accept any key; the SDK insists on one.
        api_key=keys.get(name, "none"),
        default_headers=provider.headers or None,
        timeout=openai.Timeout(
            provider.timeout_seconds or 600.0, connect=provider.connect_timeout_seconds
        ),
        max_retries=0,
    )
