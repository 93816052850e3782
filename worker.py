"""Start one worker for this deployment: `python worker.py --help`.

agentrun's engine (the same as `agentrun-worker`, with the same flags) plus this repository's
own workflows and activities (workflows/, activities/): a business workflow that runs an
agent as a child. Only agentrun's public API is imported here (tests/test_deployment_code.py).
REFUND_LEDGER names the refund ledger the example's activity writes (default
.agentrun/refunds.jsonl). To put agentrun on a Client and Worker of your own instead, see
docs/temporal-app.md (`agentrun.AgentrunPlugin`).
"""

import os
from pathlib import Path

import activities
import agentrun
import workflows

if __name__ == "__main__":
    ledger = Path(os.environ.get("REFUND_LEDGER", ".agentrun/refunds.jsonl"))
    agentrun.worker_command(workflows=workflows.WORKFLOWS, activities=activities.for_worker(ledger))
