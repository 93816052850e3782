"""Record AgentEval workflow histories into tests/histories/, for the replay test.

Run after an intended change to agentledger/workflows/evals.py:
`python scripts/record_eval_history.py NAME` writes tests/histories/NAME_first_run.json (an
eval of three cases, two at once, that continues as new after its first batch of two) and
NAME.json (its last run: the third case). Keep the old files: evals in flight were started
by the old code. It starts its own in-memory Temporal dev server, embedded Postgres and
offline model.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentledger.core.eval_cases import (  # noqa: E402
    EvalCaseTask,
    EvalWorkflowInput,
    eval_workflow_id,
)
from agentledger.core.spec import RunSpec  # noqa: E402
from agentledger.dev.offline_model import offline_planner  # noqa: E402
from agentledger.workflows.evals import EvalWorkflow  # noqa: E402
from scripts.recording_stack import recording_worker  # noqa: E402

OUT = ROOT / "tests" / "histories"
TASK_QUEUE = "record-eval-history"
EVAL_ID = "history"
# The workflow id the histories were recorded under (their children's ids derive from it).
WORKFLOW_ID = eval_workflow_id("default", EVAL_ID)


async def main(name: str) -> None:
    async with recording_worker(offline_planner, TASK_QUEUE) as client:
        cases = [
            EvalCaseTask(name=f"case-{i}", task=f"Summarize the refund policy, part {i}.")
            for i in range(3)
        ]
        handle = await client.start_workflow(
            EvalWorkflow.run,
            EvalWorkflowInput(
                eval_id=EVAL_ID,
                candidate=RunSpec(task="-", allowed_tools=["search_notes"]),
                cases=cases,
                concurrency=2,
                batch=2,
                total=len(cases),
            ),
            id=WORKFLOW_ID,
            task_queue=TASK_QUEUE,
        )
        done = await handle.result()
        assert done.done == done.total == 3, done
        first = await client.get_workflow_handle(
            WORKFLOW_ID, run_id=handle.first_execution_run_id
        ).fetch_history()
        (OUT / f"{name}_first_run.json").write_text(first.to_json())
        last = await client.get_workflow_handle(WORKFLOW_ID).fetch_history()
        (OUT / f"{name}.json").write_text(last.to_json())
        print(f"recorded {name}_first_run: {len(first.events)} events, {name}: {len(last.events)}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/record_eval_history.py NAME (e.g. eval_current)")
    asyncio.run(main(sys.argv[1]))
