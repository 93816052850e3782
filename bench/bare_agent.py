"""Bare agent: the agent loop a user of the peers writes on bare Temporal, our fair baseline.

A model-call activity asks the model (the real `openai` client over HTTP, against the same
offline model server and scripted responder as ours), then the workflow runs one tool
activity for each tool call it returned, in order, and asks again with the results, until
the model answers. No mirror, no ledger, no journal, no leases, no verify, no receipt: only
what Temporal itself keeps.

What is matched with `bench.ours`, so that ours ÷ bare agent is the price of what we add:
- the task ("bench: N steps"), the scripted model (`bench.ours.responder`: one turn asking
  for N calls of `bench_noop`, then the answer) and so the number of steps: 2 model calls
  and N tool activities per run;
- the tool: `bench_noop`, its arguments validated with the same pydantic model
  (`bench.ours.NoArgs`) and offered to the model with the same JSON schema, returning the
  same `{"n": n}`;
- the server, the worker settings (`worker_tuning()` without our sandbox passthrough
  list), the pydantic data converter, and an `openai.AsyncOpenAI` client without
  retries of its own (Temporal retries), as our worker uses.
What differs on purpose: ours streams the model's reply (AGENTLEDGER_MODEL_STREAM) and runs
model calls on a queue of their own; here one non-streamed call on the run's queue.
It lives in an importable module because Temporal's sandbox refuses workflows in `__main__`.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    import openai

    from bench.ours import NOOP_TOOL, PAGE_TOOL, NoArgs, page_text

AGENT_WORKFLOW = "BenchBareAgent"
AGENT_MODEL = "bench.agent.model"
AGENT_TOOL = "bench.agent.tool"
MAX_TURNS = 5  # ours' run_spec allows as many model turns

Json = dict[str, Any]


class AgentTask(BaseModel):
    task: str
    model: str
    tool: str = NOOP_TOOL  # the long-run workload offers PAGE_TOOL instead
    max_turns: int = MAX_TURNS


class ModelRequest(BaseModel):
    model: str
    messages: list[Json]
    tool: str = NOOP_TOOL


class ToolCall(BaseModel):
    call_id: str
    name: str
    arguments: str  # the model's JSON text, parsed and validated by the tool activity


class ModelReply(BaseModel):
    message: Json  # the assistant message, to send back on the next turn
    content: str | None
    tool_calls: list[ToolCall]


class AgentResult(BaseModel):
    answer: str | None
    tool_steps: int
    model_calls: int


async def bench_noop(args: NoArgs) -> Json:
    return {"n": args.n}


async def bench_page(args: NoArgs) -> Json:
    return {"n": args.n, "text": page_text(args.n)}


TOOLS = {
    NOOP_TOOL: (NoArgs, bench_noop, "Does nothing, at once."),
    PAGE_TOOL: (NoArgs, bench_page, "Reads page n: 4 KB of text."),
}


def tool_schemas(tool: str = NOOP_TOOL) -> list[Json]:
    """What the model is offered: the same function schema ours sends for the tool."""
    args_model, _, description = TOOLS[tool]
    return [
        {
            "type": "function",
            "function": {
                "name": tool,
                "description": description,
                "parameters": args_model.model_json_schema(),
            },
        }
    ]


class AgentActivities:
    """The two activities, sharing one model client per worker."""

    def __init__(self, client: openai.AsyncOpenAI) -> None:
        self.client = client

    @activity.defn(name=AGENT_MODEL)
    async def complete(self, request: ModelRequest) -> ModelReply:
        response = await self.client.chat.completions.create(
            model=request.model,
            messages=request.messages,  # type: ignore[arg-type]
            tools=tool_schemas(request.tool),  # type: ignore[arg-type]
        )
        message = response.choices[0].message
        return ModelReply(
            message=message.model_dump(exclude_none=True, exclude_unset=True),
            content=message.content,
            tool_calls=[
                ToolCall(call_id=c.id, name=c.function.name, arguments=c.function.arguments)
                for c in message.tool_calls or []
                if c.type == "function"
            ],
        )

    @activity.defn(name=AGENT_TOOL)
    async def invoke(self, call: ToolCall) -> Json:
        args_model, fn, _ = TOOLS[call.name]
        return await fn(args_model.model_validate(json.loads(call.arguments or "{}")))


@workflow.defn(name=AGENT_WORKFLOW)
class BareAgentWorkflow:
    @workflow.run
    async def run(self, task: AgentTask) -> AgentResult:
        messages: list[Json] = [{"role": "user", "content": task.task}]
        steps = 0
        for turn in range(1, task.max_turns + 1):
            reply = await workflow.execute_activity_method(
                AgentActivities.complete,
                ModelRequest(model=task.model, messages=messages, tool=task.tool),
                start_to_close_timeout=timedelta(seconds=60),
            )
            messages.append(reply.message)
            if not reply.tool_calls:
                return AgentResult(answer=reply.content, tool_steps=steps, model_calls=turn)
            for call in reply.tool_calls:
                result = await workflow.execute_activity_method(
                    AgentActivities.invoke, call, start_to_close_timeout=timedelta(seconds=30)
                )
                steps += 1
                messages.append(
                    {"role": "tool", "tool_call_id": call.call_id, "content": json.dumps(result)}
                )
        return AgentResult(answer=None, tool_steps=steps, model_calls=task.max_turns)
