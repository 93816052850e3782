"""An agent inside your own workflow: `await run_agent(spec, key=...)` from any `@workflow.defn`.

The run is a child workflow, so it is as durable as its parent: it survives the parent's
worker, waits for people with no worker held, and keeps its own receipt and mirror rows. Its
id derives from the parent's and the key, so a replayed or retried parent finds the same run
instead of starting a second one; cancelling the parent cancels the run.

Like every start, the run takes its tenant's policy, read from Postgres (activity
`tenants.policy`, agentledger.workflows.run_starts) just before it starts: the tenant's
approvers and weight, a priority the tenant may take (another is refused, raising an
ApplicationError of type `OperationRefused` in the calling workflow), and for a capped
tenant a wait in its admission queue.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError, ChildWorkflowError

from agentledger.workflows import run_endings, run_starts

with workflow.unsafe.imports_passed_through():
    from agentledger.core.constants import RUN_ID_PREFIX
    from agentledger.core.keys import id_part
    from agentledger.core.results import RunResult
    from agentledger.core.spec import RunSpec

# Deprecated patch id: the run reads its tenant's policy before it starts. Its marker is still
# written, so that `agentledger deploy check` and `deploy patches` can name a parent recorded
# before (it started its agent's run without the read) as needing this retired branch
# (agentledger.core.version_branches); such a parent replays only on the build it began on.
READS_POLICY = "run-agent-reads-policy"
REFUSED = "OperationRefused"


def child_run_id(parent_id: str, key: str) -> str:
    """`run-~child.<parent>~<key>`: ids under `run-~` are the engine's (forks are
    `run-~fork.`), and neither part can hold a `~` (id_part replaces it), so no start through
    the start gate, a fork or another parent's child takes a child's id."""
    return f"{RUN_ID_PREFIX}~child.{id_part(parent_id)}~{id_part(key)}"


async def run_agent(spec: RunSpec, *, key: str, task_queue: str | None = None) -> RunResult:
    """Run an agent as a child of the calling workflow and return how it ended.

    `key` names this run among the parent's (one parent, one key, one run); `task_queue` is
    the queue agentledger's workers poll, by default the parent's own (a deployment's worker
    serves its workflows beside the engine's). The result's status says whether the agent
    completed, failed or was cancelled; a run that ends otherwise than completed (Temporal
    shows it Failed or Canceled) is not an exception. A priority the run's tenant may not
    take raises an ApplicationError of type `OperationRefused`, and no run starts.
    """
    parent = workflow.info().workflow_id
    spec = spec.model_copy(update={"idempotency_key": f"{parent}~{key}"})
    workflow.deprecate_patch(READS_POLICY)
    run = await run_starts.read_policy(spec, task_queue=task_queue)
    if isinstance(run, str):
        raise ApplicationError(run, type=REFUSED, non_retryable=True)
    handle = await run_starts.start_run(
        run,
        run_id=child_run_id(parent, key),
        summary=f"{spec.agent or 'agent'} for {parent}",
        task_queue=task_queue,
    )
    try:
        return await handle
    except ChildWorkflowError as err:  # it failed or was cancelled: still a result
        return run_endings.child_result(err, handle.id)
