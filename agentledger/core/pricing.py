"""What a model call cost, from the token counts: the worker's own price list first
(AGENTLEDGER_MODEL_PRICES), then the maintained table of `genai-prices`. A model neither knows
is unpriced: its cost is unknown, and said so, never taken for $0."""

from __future__ import annotations

import functools
from typing import Any

from openai.types.chat import ChatCompletion

from agentledger.core.results import Usage

Prices = dict[str, tuple[float, float]]  # model -> (usd per 1M input, per 1M output)


def price_of(prices: Prices, model: str, usage: Usage, provider: str | None = None) -> float | None:
    """The call's cost in USD, or None when no price is known for `model`. `provider` (the
    price table's provider id: openai, anthropic, ...) narrows the table's look-up; None lets
    the table find the model's usual provider."""
    if model in prices:
        per_in, per_out = prices[model]
        return round((usage.input_tokens * per_in + usage.output_tokens * per_out) / 1e6, 6)
    return _from_table(model, usage.input_tokens, usage.output_tokens, provider)


def cost_usd(prices: Prices, model: str, usage: Usage, provider: str | None = None) -> float:
    """The call's cost where a number must stand: 0 for an unpriced model (callers that can
    say "unknown" use `price_of`)."""
    return price_of(prices, model, usage, provider) or 0.0


def _from_table(
    model: str, input_tokens: int, output_tokens: int, provider: str | None
) -> float | None:
    table = _table()
    if table is None:
        return None
    calc_price, table_usage = table
    try:
        found = calc_price(
            table_usage(input_tokens=input_tokens, output_tokens=output_tokens),
            model,
            provider_id=provider,
        )
    except LookupError:
        # Not in the table, or served by a provider it does not list (a self-hosted one):
        # the same name there may be priced quite differently, so no guess.
        return None
    return round(float(found.total_price), 6)


@functools.cache
def _table() -> tuple[Any, Any] | None:
    """genai-prices' calculator, imported on first use (it loads its table then)."""
    try:
        from genai_prices import Usage as TableUsage
        from genai_prices import calc_price
    except ImportError:  # pragma: no cover - a dependency; absent only in a broken install
        return None
    return calc_price, TableUsage


def usage_of(response: ChatCompletion) -> Usage:
    """The tokens a response reports (none if the provider left them out)."""
    if response.usage is None:
        return Usage()
    return Usage(
        input_tokens=response.usage.prompt_tokens,
        output_tokens=response.usage.completion_tokens,
    )
