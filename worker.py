"""Start one worker for this deployment: `python worker.py --help`.

This deployment's own Temporal worker: its Client, connected with agentledger's plugin, and its
Worker, with its own workflow and activity (workflows/, activities/: a business workflow that
runs an agent as a child) beside the engine the plugin registers (docs/temporal-app.md).
`agentledger.worker_command` is the edge: agentledger-worker's flags and the environment, read into
`edge` (the plugin's config, the server to connect to, the worker's slots and drain), then
signals, logging and exit codes. Only agentledger's public API is imported here
(tests/test_deployment_code.py). REFUND_LEDGER names the refund ledger the example's activity
writes (default .agentledger/refunds.jsonl).
"""

import os
from pathlib import Path

from temporalio.client import Client
from temporalio.worker import Worker

import agentledger
from activities import RefundActivities
from workflows import RefundReviewWorkflow


async def serve(edge) -> None:  # agentledger's WorkerEdge, built by worker_command
    plugin = agentledger.AgentLedgerPlugin(edge.config)
    client = await Client.connect(**edge.client_options(), plugins=[plugin])
    ledger = Path(os.environ.get("REFUND_LEDGER", ".agentledger/refunds.jsonl"))
    worker = Worker(
        client,
        task_queue=edge.task_queue,
        workflows=[RefundReviewWorkflow],
        activities=[RefundActivities(ledger).record],
        **edge.worker_options(),
    )
    await edge.serve(plugin, worker)


if __name__ == "__main__":
    agentledger.worker_command(serve)
