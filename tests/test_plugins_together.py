"""AgentLedgerPlugin beside the SDK's OpenAI Agents plugin on one Client and one Worker: an
OpenAI Agents SDK agent and an agentledger run both complete, each through its own plugin's
model activity, over the same offline model server."""

from __future__ import annotations

import uuid
from datetime import timedelta

import openai
from agents import set_tracing_disabled
from agents.models.openai_provider import OpenAIProvider
from temporalio.client import Client
from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from agentledger import AgentLedgerConfig, AgentLedgerPlugin, RunClient
from tests.openai_agents_workflow import OpenAIAgentsAnswer
from tests.support import rows


async def test_openai_agents_and_agentledger_in_one_worker(
    env: WorkflowEnvironment, database_url: str, model_server, pool
):
    set_tracing_disabled(True)  # the SDK's tracing would post to OpenAI
    queue = f"together-{uuid.uuid4().hex[:8]}"
    config = AgentLedgerConfig(
        database_url=database_url,
        openai_base_url=model_server.base_url,
        demo=True,
        task_queue=queue,
    )
    openai_agents = OpenAIAgentsPlugin(
        model_params=ModelActivityParameters(start_to_close_timeout=timedelta(seconds=60)),
        model_provider=OpenAIProvider(
            openai_client=openai.AsyncOpenAI(
                base_url=model_server.base_url, api_key="test", max_retries=0
            ),
            use_responses=False,  # the offline model serves chat completions
        ),
    )
    client = await Client.connect(
        env.client.service_client.config.target_host,
        plugins=[openai_agents, AgentLedgerPlugin(config)],
    )
    worker = Worker(client, task_queue=queue, workflows=[OpenAIAgentsAnswer])
    async with worker, RunClient.on(client, config) as run_client:
        theirs = await client.execute_workflow(
            OpenAIAgentsAnswer.run,
            "Summarize our refund policy.",
            id=f"openai-agents-{queue}",
            task_queue=queue,
        )
        ours = (
            await run_client.runs.start("Look up our refund policy.", idempotency_key=queue)
        ).run_id
        result = await run_client.runs.result(ours)

    assert theirs.strip(), "the OpenAI Agents SDK agent answered"
    assert result.status.value == "completed", result
    mirrored = await rows(pool, "SELECT status FROM runs WHERE run_id = %s", ours)
    assert mirrored == [{"status": "completed"}]
    registered = {type(p).__name__ for p in client.config()["plugins"]}
    assert registered == {"OpenAIAgentsPlugin", "AgentLedgerPlugin"}
