"""Start one worker for this deployment: `python worker.py --help`.

This deployment's own Temporal worker, as the SDK's samples write one: a Client connected
with agentledger's plugin, and a Worker with its own workflow and activity (workflows/,
activities/: a business workflow that runs an agent as a child) beside the engine the plugin
registers. `agentledger.worker_command_line()` is the process's edge:
agentledger-worker's flags and the environment read once into `edge.config`, logging, the
tools and MCP servers the flags name; `edge.attend(worker, plugin)` stops the worker on
SIGINT or SIGTERM, draining its steps in hand. Only agentledger's public API is imported
here (a test holds it to that), so it keeps working as agentledger's insides change.
REFUND_LEDGER names the refund ledger the example's activity writes (default
.agentledger/refunds.jsonl).
"""

import asyncio
import os
from pathlib import Path

from temporalio.client import Client
from temporalio.worker import Worker

import agentledger
from activities import RefundActivities
from workflows import RefundReviewWorkflow


async def main() -> None:
    async with agentledger.worker_command_line() as edge:
        plugin = agentledger.AgentLedgerPlugin(edge.config)
        client = await Client.connect(**edge.client_options(), plugins=[plugin])
        ledger = Path(os.environ.get("REFUND_LEDGER", ".agentledger/refunds.jsonl"))
        worker = Worker(
            client,
            task_queue=edge.config.task_queue,
            workflows=[RefundReviewWorkflow],
            activities=[RefundActivities(ledger).record],
            **edge.worker_options(),
        )
        edge.attend(worker, plugin)
        await worker.run()


if __name__ == "__main__":
    asyncio.run(main())
