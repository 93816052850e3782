"""An OpenAI Agents SDK agent in a workflow, as `temporalio.openai_agents` documents it: the
other kind of agent tests/test_plugins_together.py runs beside agentledger's in one worker."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agents import Agent, Runner

    from agentledger.core.constants import OFFLINE_MODEL


@workflow.defn(name="OpenAIAgentsAnswer")
class OpenAIAgentsAnswer:
    @workflow.run
    async def run(self, task: str) -> str:
        agent = Agent(
            name="helper", instructions="You are a careful assistant.", model=OFFLINE_MODEL
        )
        result = await Runner.run(agent, input=task, max_turns=3)
        return str(result.final_output)
