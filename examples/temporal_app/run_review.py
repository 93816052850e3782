"""Your Temporal app with agentledger added: a Client with `AgentLedgerPlugin`, your Worker,
your workflow asking an agent, the agent's approval decided, its receipt read.

    agentledger up                              # terminal 1: the local stack (Ctrl-C stops it)
    python examples/temporal_app/run_review.py  # terminal 2, from the same folder
"""

import asyncio
import uuid

from review_workflow import OrderReview
from temporalio.client import Client
from temporalio.worker import Worker

from agentledger import AgentLedgerConfig, AgentLedgerPlugin, NotFound, RunClient

TASK = "Look up our refund policy and notify ana@example.com about it."


async def main() -> None:
    # The local stack's addresses: `agentledger up` writes them to .agentledger/stack.json,
    # which load() reads (TEMPORAL_ADDRESS, DATABASE_URL, OPENAI_BASE_URL win when set).
    stack = AgentLedgerConfig.load()
    config = AgentLedgerConfig(
        database_url=stack.database_url,
        openai_base_url=stack.openai_base_url,
        demo=True,  # the demo's tools; yours: tools=[...]
        task_queue="orders",  # the engine serves runs on your worker's queue
    )
    client = await Client.connect(stack.temporal_address, plugins=[AgentLedgerPlugin(config)])
    review_id = f"review-{uuid.uuid4().hex[:8]}"
    agent_run = f"run-~child.{review_id}~agent"  # run_agent's key is "agent"
    worker = Worker(client, task_queue="orders", workflows=[OrderReview])
    async with worker, RunClient.on(client, config) as agentledger:
        review = await client.start_workflow(
            OrderReview.run, TASK, id=review_id, task_queue="orders"
        )
        while True:  # until the agent's message waits for a person
            try:
                pending = (await agentledger.runs.status(agent_run)).pending_approval
            except NotFound:  # not started yet
                pending = None
            if pending is not None:
                break
            await asyncio.sleep(0.5)
        print(f"{agent_run} asks to run {pending.tool}: approving")
        await agentledger.runs.approve(agent_run, by="you", role=pending.required_role)
        print("the review ended:", await review.result())
        receipt = await agentledger.runs.receipt(agent_run)
        print("receipt:", receipt.outcome, f"{len(receipt.steps)} steps")


if __name__ == "__main__":
    asyncio.run(main())
