"""A dataset's LLM judges call their model through agentledger's providers.

pydantic-evals' `LLMJudge` would call pydantic-ai's default model (OpenAI, with its own key
and address). Here a judge's `model` is read as agentledger reads a run's: `PROVIDER:MODEL`
names a provider of AGENTLEDGER_PROVIDERS; any other name (`openai:gpt-4o`, `gpt-4o`) is a model
of the default client (OPENAI_BASE_URL, OPENAI_API_KEY); no model is AGENTLEDGER_MODEL there.
So the judge reaches the endpoints, keys and offline model the workers use, with the
workers' own clients (agentledger.activities.provider_clients), which is why this sits with
the client, over the engine and its activities.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from pydantic_ai.models import Model
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_evals.evaluators import Evaluator, LLMJudge

from agentledger.activities.provider_clients import ProviderClients, model_client
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.providers import load_providers


class JudgeModels:
    """The judges' models, on clients built at the first judge (a dataset without one needs
    no model key)."""

    def __init__(self, config: AgentLedgerConfig) -> None:
        self.config = config
        self._clients: ProviderClients | None = None

    def clients(self) -> ProviderClients:
        if self._clients is None:
            providers = load_providers(self.config.providers)
            self._clients = ProviderClients(
                model_client(self.config), providers, self.config.provider_keys
            )
        return self._clients

    def model(self, name: str | None) -> Model:
        clients = self.clients()
        provider, _, model = (name or "").rpartition(":")
        endpoint = clients.named.get(provider, clients.default)
        return OpenAIChatModel(
            model or self.config.model, provider=OpenAIProvider(openai_client=endpoint.client)
        )

    def through_providers(self, evaluators: Sequence[Evaluator[Any, Any, Any]]) -> list[Any]:
        """The evaluators, each LLMJudge's model one of agentledger's."""
        return [
            dataclasses.replace(e, model=self.model(e.model if isinstance(e.model, str) else None))
            if isinstance(e, LLMJudge) and not isinstance(e.model, Model)
            else e
            for e in evaluators
        ]
