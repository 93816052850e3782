"""Peer 2: the same agent on Pydantic AI's `TemporalAgent`, as its docs show.

`pydantic-ai-slim[temporal]`: an `Agent` with the benchmark's tool, wrapped in
`TemporalAgent`, run by `temporal_agent.run(...)` inside a workflow; `PydanticAIPlugin` on
the client and `AgentPlugin(temporal_agent)` on the worker make each model request and each
tool call an activity. No mirror, no ledger: only what Temporal keeps.

Matched with `bench.ours`: the task, the scripted model (one turn of N `bench_noop` calls,
then the answer), the tool (`bench_noop(n)` returning `{"n": n}`), the server and an
`openai.AsyncOpenAI` client without retries of its own, over chat completions.
The calls of one turn run one at a time (the tool is `sequential=True`), as ours and the bare
agent run them: by default Pydantic AI starts a turn's calls at once, and a step's latency,
the gap between consecutive tool completions, would then time nothing.
`TemporalAgent` is deprecated in 2.x in favour of the `TemporalDurability` capability; it is
the API the issue names and still the documented one for a workflow of one agent.
"""

from __future__ import annotations

import os
import warnings

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    import openai
    from pydantic_ai import Agent, UsageLimits
    from pydantic_ai.durable_exec.temporal import TemporalAgent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from bench.ours import NOOP_TOOL, PAGE_TOOL, page_text

PEER_WORKFLOW = "BenchPydanticAI"
AGENT_NAME = "bench"


def _model() -> OpenAIChatModel:
    # The model's client is built when the module loads; it is used only in activities.
    client = openai.AsyncOpenAI(
        base_url=os.environ.get("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
        api_key=os.environ.get("OPENAI_API_KEY", "bench"),
        max_retries=0,
    )
    return OpenAIChatModel("offline-planner", provider=OpenAIProvider(openai_client=client))


agent = Agent(_model(), name=AGENT_NAME, instructions="You are a careful assistant.")


@agent.tool_plain(name=NOOP_TOOL, sequential=True)
async def bench_noop(n: int = 0) -> dict[str, int]:
    """Does nothing, at once."""
    return {"n": n}


with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # TemporalAgent's deprecation (see the module's note)
    temporal_agent = TemporalAgent(agent)

# The activities TemporalAgent registers: one model request, and a tool call of the agent's
# own function toolset (every function tool goes through it).
PEER_MODEL = f"agent__{AGENT_NAME}__model_request"
PEER_TOOL = f"agent__{AGENT_NAME}__toolset__<agent>__call_tool"


@workflow.defn(name=PEER_WORKFLOW)
class PydanticAIWorkflow:
    @workflow.run
    async def run(self, task: str) -> str:
        result = await temporal_agent.run(task)
        return str(result.output)


# The long-run workload (bench/long_run.py): an agent of its own with the page tool, run
# without Pydantic AI's default limit of 50 model requests.
LONG_AGENT_NAME = "bench_long"
long_agent = Agent(_model(), name=LONG_AGENT_NAME, instructions="You are a careful assistant.")


@long_agent.tool_plain(name=PAGE_TOOL, sequential=True)
async def bench_page(n: int = 0) -> dict[str, object]:
    """Reads page n: 4 KB of text."""
    return {"n": n, "text": page_text(n)}


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    temporal_long_agent = TemporalAgent(long_agent)

PEER_LONG_WORKFLOW = "BenchPydanticAILong"
PEER_LONG_TOOL = f"agent__{LONG_AGENT_NAME}__toolset__<agent>__call_tool"


@workflow.defn(name=PEER_LONG_WORKFLOW)
class PydanticAILongWorkflow:
    @workflow.run
    async def run(self, task: str) -> str:
        result = await temporal_long_agent.run(task, usage_limits=UsageLimits(request_limit=None))
        return str(result.output)
