"""Peer 1: the same agent on the OpenAI Agents SDK with Temporal's plugin, as its docs show.

`temporalio-openai-agents` (`temporalio.openai_agents`, formerly
`temporalio.contrib.openai_agents`): an `agents.Agent` whose tool is a Temporal activity
(`workflow.activity_as_tool`), run by `agents.Runner.run` inside a workflow; the plugin on
the client and the worker turns each model call into an activity (`invoke_model_activity`).
No mirror, no ledger: only what Temporal keeps.

Matched with `bench.ours`: the task ("bench: N steps"), the scripted model (one turn asking
for N calls of `bench_noop`, then the answer), the tool (`bench_noop`, the same argument
model, returning `{"n": n}`), the server and an `openai.AsyncOpenAI` client without retries
of its own over chat completions (the offline model serves no Responses API).
The N calls of one turn run one at a time (`ToolExecutionConfig(max_function_tool_concurrency=1)`),
as ours and the bare agent run them: by default the SDK starts a turn's calls at once, and a
step's latency, the gap between consecutive tool completions, would then time nothing
(2.2 ms in the run before this was matched). The SDK's tracing is off (it would post to
OpenAI).
"""

from __future__ import annotations

import os
from datetime import timedelta

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    from agents import Agent, RunConfig, Runner
    from agents.run_config import ToolExecutionConfig
    from temporalio.openai_agents import workflow as agents_workflow

    from agentledger.core.constants import OFFLINE_MODEL
    from bench.ours import NOOP_TOOL, PAGE_TOOL, page_text

PEER_WORKFLOW = "BenchOpenAIAgents"
PEER_MODEL = "invoke_model_activity"
PEER_TOOL = NOOP_TOOL
PEER_GATED_WORKFLOW = "BenchOpenAIAgentsGated"
# The long-run workload (bench/long_run.py): a page per model turn, as many turns as it takes.
PEER_LONG_WORKFLOW = "BenchOpenAIAgentsLong"
PEER_LONG_TOOL = PAGE_TOOL
LONG_MAX_TURNS = 1000


@activity.defn(name=NOOP_TOOL)
async def bench_noop(n: int = 0) -> dict[str, int]:
    """Does nothing, at once."""
    return {"n": n}


@activity.defn(name=PAGE_TOOL)
async def bench_page(n: int = 0) -> dict[str, object]:
    """Reads page n: 4 KB of text."""
    return {"n": n, "text": page_text(n)}


async def run_agent(task: str, tool: object, max_turns: int) -> str:
    """The agent with its one tool (an activity), run as the SDK's docs show."""
    agent = Agent(
        name="bench",
        instructions="You are a careful assistant.",
        model=OFFLINE_MODEL,
        tools=[
            agents_workflow.activity_as_tool(
                tool,  # type: ignore[arg-type]
                start_to_close_timeout=timedelta(seconds=30),
            )
        ],
    )
    result = await Runner.run(
        agent,
        input=task,
        max_turns=max_turns,
        # One tool call at a time, as ours and the bare agent run a turn's calls.
        run_config=RunConfig(tool_execution=ToolExecutionConfig(max_function_tool_concurrency=1)),
    )
    return str(result.final_output)


@workflow.defn(name=PEER_WORKFLOW)
class OpenAIAgentsWorkflow:
    @workflow.run
    async def run(self, task: str) -> str:
        return await run_agent(task, bench_noop, max_turns=5)


@workflow.defn(name=PEER_LONG_WORKFLOW)
class OpenAIAgentsLongWorkflow:
    @workflow.run
    async def run(self, task: str) -> str:
        return await run_agent(task, bench_page, max_turns=LONG_MAX_TURNS)


def plugin(base_url: str | None = None):  # type: ignore[no-untyped-def]
    """The plugin as a worker of this peer runs it: model calls through the chat completions
    API of the scripted model, the openai client without retries of its own."""
    import openai
    from agents import set_tracing_disabled
    from agents.models.openai_provider import OpenAIProvider
    from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin

    os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
    set_tracing_disabled(True)
    client = openai.AsyncOpenAI(base_url=base_url, max_retries=0)
    return OpenAIAgentsPlugin(
        model_params=ModelActivityParameters(start_to_close_timeout=timedelta(seconds=60)),
        model_provider=OpenAIProvider(openai_client=client, use_responses=False),
    )
