"""`model.complete`: one chat-completions call through the `openai` SDK.

The client is injected with max_retries=0, so Temporal's retry policy is the only one.
Proposed tool calls are checked against the worker's registry here, so the workflow sees
clean verdicts and never runs a tool with arguments that do not validate.
"""

from __future__ import annotations

from typing import Any

import openai
from temporalio import activity

from activities.leases import hold_lease
from agentrun import faults
from agentrun.constants import ACTIVITY_MODEL_COMPLETE
from agentrun.errors import classify_model_error
from agentrun.mirror_store import MirrorStore
from agentrun.models import ModelCallInput, ModelCallResult, ProposedToolCall, Usage
from agentrun.tools import ToolRegistry


class ModelActivities:
    def __init__(
        self,
        client: openai.AsyncOpenAI,
        registry: ToolRegistry,
        store: MirrorStore,
        *,
        default_model: str,
        prices: dict[str, tuple[float, float]],
        identity: str,
    ) -> None:
        self.identity = identity
        self.client = client
        self.registry = registry
        self.store = store
        self.default_model = default_model
        self.prices = prices

    def cost(self, model: str, usage: Usage) -> float:
        per_in, per_out = self.prices.get(model, (0.0, 0.0))
        return round((usage.input_tokens * per_in + usage.output_tokens * per_out) / 1e6, 6)

    @activity.defn(name=ACTIVITY_MODEL_COMPLETE)
    async def complete(self, input: ModelCallInput) -> ModelCallResult:
        info = activity.info()
        model = input.model or self.default_model
        await self.store.begin_attempt(
            run_id=input.run_id,
            step_id=input.step_id,
            seq=input.seq,
            type="model_call",
            name=model,
            attempt=info.attempt,
            worker=self.identity,
            lease_seconds=input.heartbeat_seconds,
            input={"model": model, "messages": len(input.messages)},
        )
        tools = [t.openai_schema() for t in self.registry.allowed(input.allowed_tools)]
        request: dict[str, Any] = {
            "model": model,
            "messages": input.messages,
            "temperature": input.temperature,
        }
        if tools:
            request["tools"] = tools
        if input.max_tokens:
            request["max_tokens"] = input.max_tokens
        try:
            async with hold_lease(
                self.store,
                run_id=input.run_id,
                step_id=input.step_id,
                heartbeat_seconds=input.heartbeat_seconds,
            ):
                response = await self.client.chat.completions.create(**request)
        except openai.APIError as err:
            failure = classify_model_error(err)
            await self.store.end_attempt(
                run_id=input.run_id,
                step_id=input.step_id,
                attempt=info.attempt,
                status="failed",
                error=f"{failure.type}: {failure.message}",
            )
            raise failure from err
        faults.fire("model.after_response", model)
        message = response.choices[0].message
        proposals = [
            self._check(call.id, call.function.name, call.function.arguments, input)
            for call in message.tool_calls or []
            if call.type == "function"
        ]
        usage = Usage(
            input_tokens=response.usage.prompt_tokens if response.usage else 0,
            output_tokens=response.usage.completion_tokens if response.usage else 0,
        )
        result = ModelCallResult(
            content=message.content,
            tool_calls=proposals,
            assistant_message=message.model_dump(exclude_none=True, exclude_unset=True),
            usage=usage,
            cost_usd=self.cost(model, usage),
            model=response.model or model,
            attempt=info.attempt,
        )
        await self.store.end_attempt(
            run_id=input.run_id,
            step_id=input.step_id,
            attempt=info.attempt,
            status="succeeded",
            output={"content": result.content, "tool_calls": [p.tool for p in proposals]},
            tokens_in=usage.input_tokens,
            tokens_out=usage.output_tokens,
            cost_usd=result.cost_usd,
        )
        return result

    def _check(
        self, call_id: str, name: str, raw_arguments: str, input: ModelCallInput
    ) -> ProposedToolCall:
        arguments, error = self.registry.check_call(name, raw_arguments, input.allowed_tools)
        proposal = ProposedToolCall(call_id=call_id, tool=name, arguments=arguments, error=error)
        if name in self.registry.names():
            tool = self.registry.get(name)
            proposal.risk, proposal.side_effect = tool.risk, tool.side_effect
        return proposal
