"""An agent inside your own workflow: `await run_agent(spec, key=...)` from any `@workflow.defn`.

The run is a child workflow, so it is as durable as its parent: it survives the parent's
worker, waits for people with no worker held, and keeps its own receipt and mirror rows. Its
id derives from the parent's and the key, so a replayed or retried parent finds the same run
instead of starting a second one; cancelling the parent cancels the run.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.common import WorkflowIDReusePolicy

with workflow.unsafe.imports_passed_through():
    from agentrun.core import fairness
    from agentrun.core.constants import RUN_ID_PREFIX
    from agentrun.core.keys import id_part
    from agentrun.core.results import RunResult
    from agentrun.core.spec import RunSpec
    from agentrun.workflows.agent_run import AgentRunWorkflow
    from agentrun.workflows.changes import for_new_run


def child_run_id(parent_id: str, key: str) -> str:
    """`run-~child.<parent>~<key>`: ids under `run-~` are the engine's (forks are
    `run-~fork.`), and neither part can hold a `~` (id_part replaces it), so no start through
    the door, a fork or another parent's child takes a child's id."""
    return f"{RUN_ID_PREFIX}~child.{id_part(parent_id)}~{id_part(key)}"


async def run_agent(spec: RunSpec, *, key: str, task_queue: str | None = None) -> RunResult:
    """Run an agent as a child of the calling workflow and return how it ended.

    `key` names this run among the parent's (one parent, one key, one run); `task_queue` is
    the queue agentrun's workers poll, by default the parent's own (a deployment's worker
    serves its workflows beside the engine's). The result's status says whether the agent completed,
    failed or was cancelled; a run that ends otherwise than completed is not an exception.
    """
    parent = workflow.info().workflow_id
    run_id = child_run_id(parent, key)
    spec = for_new_run(spec.model_copy(update={"idempotency_key": f"{parent}~{key}"}))
    return await workflow.execute_child_workflow(
        AgentRunWorkflow.run,
        spec,
        id=run_id,
        task_queue=task_queue or workflow.info().task_queue,
        id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        parent_close_policy=workflow.ParentClosePolicy.REQUEST_CANCEL,
        static_summary=f"{spec.agent or 'agent'} for {parent}",
        priority=fairness.run_priority(spec.priority, spec.tenant),
    )
