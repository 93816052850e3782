"""The committed histories, and a replayer that runs them as the workers do.

Every replay test goes through here: a history replays under the workflow id it was recorded
with where its run depends on it, and inside the workers' own sandbox, which shares native
modules (the signature checks' `cryptography`) with the process instead of importing them a
second time (a second import of a native extension aborts the whole process).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from agentledger.client.scope import run_id_for
from agentledger.core.eval_cases import eval_workflow_id
from agentledger.worker.worker_factory import worker_tuning
from agentledger.workflows.subagents import subagent_run_id

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))
# Histories whose replay needs the workflow id they were recorded under: a signed decision
# covers its run's id, a sub-agent's child id derives from it (scripts/record_histories.py names
# runs "history-<scenario>").
RECORDED_IDS = {
    "signed_approval": run_id_for("history-signed_approval"),
    # Kept from generation 5 (before an edit was a merge patch): recorded under the same ids.
    "generation_5_signed_approval": run_id_for("history-signed_approval"),
    "generation_5_subagents": run_id_for("history-subagents"),
    # A sub-agent's child run id derives from its parent's.
    "subagents": run_id_for("history-subagents"),
    "subagent_paused_and_approved": run_id_for("history-subagent_paused_and_approved"),
    # The child's own run (its notices name it).
    "subagent_paused_and_approved_child": subagent_run_id(
        run_id_for("history-subagent_paused_and_approved"), "0002-tool_call"
    ),
    # An eval's case runs' ids derive from the eval's (scripts/record_eval_history.py).
    "eval_current": eval_workflow_id("default", "history"),
    "eval_current_first_run": eval_workflow_id("default", "history"),
}


def recorded_history(path: Path) -> WorkflowHistory:
    """The history in `path`, under its recorded workflow id (or `replay-<name>`).

    A history kept from an older generation (`generation_5_subagents`) was recorded under its
    scenario's name, so it replays under that scenario's id."""
    scenario = re.sub(r"^generation_\d+_", "", path.stem)
    workflow_id = RECORDED_IDS.get(scenario, f"replay-{path.stem}")
    return WorkflowHistory.from_json(workflow_id, path.read_text())


def replayer(workflows: list[type], **options: Any) -> Replayer:
    """A replayer with the workers' data converter and sandbox."""
    return Replayer(
        workflows=workflows,
        data_converter=pydantic_data_converter,
        workflow_runner=worker_tuning()["workflow_runner"],
        **options,
    )
