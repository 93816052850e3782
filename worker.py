"""Start one worker for this deployment: `python worker.py --help`.

agentrun's engine (the same as `agentrun-worker`) plus this repository's own workflows and
activities (workflows/, activities/): a business workflow that runs an agent as a child.
REFUND_LEDGER names the refund ledger the example's activity writes (default
.agentrun/refunds.jsonl).
"""

import os
from pathlib import Path

import activities
import workflows
from agentrun.worker.main import main

if __name__ == "__main__":
    ledger = Path(os.environ.get("REFUND_LEDGER", ".agentrun/refunds.jsonl"))
    main(workflows=workflows.WORKFLOWS, activities=activities.for_worker(ledger))
