"""What a model call cost, from the token counts and the worker's price list."""

from __future__ import annotations

from openai.types.chat import ChatCompletion

from agentrun.core.models import Usage

Prices = dict[str, tuple[float, float]]  # model -> (usd per 1M input, per 1M output)


def cost_usd(prices: Prices, model: str, usage: Usage) -> float:
    per_in, per_out = prices.get(model, (0.0, 0.0))
    return round((usage.input_tokens * per_in + usage.output_tokens * per_out) / 1e6, 6)


def usage_of(response: ChatCompletion) -> Usage:
    """The tokens a response reports (none if the provider left them out)."""
    if response.usage is None:
        return Usage()
    return Usage(
        input_tokens=response.usage.prompt_tokens,
        output_tokens=response.usage.completion_tokens,
    )
