"""Start one worker for this deployment: `python worker.py --help`.

This deployment's own Temporal worker: its Client, connected with agentrun's plugin, and its
Worker, with its own workflow and activity (workflows/, activities/: a business workflow that
runs an agent as a child) beside the engine the plugin registers (docs/temporal-app.md).
`agentrun.worker_command` is the edge: agentrun-worker's flags and the environment, read into
`edge` (the plugin's config, the server to connect to, the worker's slots and drain), then
signals, logging and exit codes. Only agentrun's public API is imported here
(tests/test_deployment_code.py). REFUND_LEDGER names the refund ledger the example's activity
writes (default .agentrun/refunds.jsonl).
"""

import os
from pathlib import Path

from temporalio.client import Client
from temporalio.worker import Worker

import agentrun
from activities import RefundActivities
from workflows import RefundReviewWorkflow


async def serve(edge) -> None:  # agentrun's WorkerEdge, built by worker_command
    plugin = agentrun.AgentrunPlugin(edge.config)
    client = await Client.connect(**edge.client_options(), plugins=[plugin])
    ledger = Path(os.environ.get("REFUND_LEDGER", ".agentrun/refunds.jsonl"))
    worker = Worker(
        client,
        task_queue=edge.task_queue,
        workflows=[RefundReviewWorkflow],
        activities=[RefundActivities(ledger).record],
        **edge.worker_options(),
    )
    await edge.serve(plugin, worker)


if __name__ == "__main__":
    agentrun.worker_command(serve)
