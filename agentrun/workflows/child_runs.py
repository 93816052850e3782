"""An agent inside your own workflow: `await run_agent(spec, key=...)` from any `@workflow.defn`.

The run is a child workflow, so it is as durable as its parent: it survives the parent's
worker, waits for people with no worker held, and keeps its own receipt and mirror rows. Its
id derives from the parent's and the key, so a replayed or retried parent finds the same run
instead of starting a second one; cancelling the parent cancels the run.

Like every start, the run takes its tenant's policy, read from Postgres (activity
`tenants.policy`) just before it starts: the tenant's approvers and weight, a priority the
tenant may take (another is refused, raising an ApplicationError of type `OperationRefused`
in the calling workflow), and for a capped tenant a wait in its admission queue.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from agentrun.activities.admission import AdmissionActivities
    from agentrun.core import fairness
    from agentrun.core.admission_models import HoldRequest
    from agentrun.core.constants import RUN_ID_PREFIX
    from agentrun.core.keys import id_part
    from agentrun.core.results import RunResult
    from agentrun.core.spec import RunSpec
    from agentrun.core.tenant_policy import PolicyInput, held_spec
    from agentrun.workflows.agent_run import AgentRunWorkflow
    from agentrun.workflows.changes import for_new_run

# Deprecated patch id: the run reads its tenant's policy before it starts. Its marker is still
# written, so that `agentrun deploy check` and `deploy patches` can name a parent recorded
# before (it started its agent's run without the read) as needing this retired branch
# (agentrun/core/version_branches.py); such a parent replays only on the build it began on.
READS_POLICY = "run-agent-reads-policy"
POLICY_TIMEOUT = timedelta(seconds=30)
REFUSED = "OperationRefused"


def child_run_id(parent_id: str, key: str) -> str:
    """`run-~child.<parent>~<key>`: ids under `run-~` are the engine's (forks are
    `run-~fork.`), and neither part can hold a `~` (id_part replaces it), so no start through
    the door, a fork or another parent's child takes a child's id."""
    return f"{RUN_ID_PREFIX}~child.{id_part(parent_id)}~{id_part(key)}"


async def run_agent(spec: RunSpec, *, key: str, task_queue: str | None = None) -> RunResult:
    """Run an agent as a child of the calling workflow and return how it ended.

    `key` names this run among the parent's (one parent, one key, one run); `task_queue` is
    the queue agentrun's workers poll, by default the parent's own (a deployment's worker
    serves its workflows beside the engine's). The result's status says whether the agent
    completed, failed or was cancelled; a run that ends otherwise than completed is not an
    exception. A priority the run's tenant may not take raises an ApplicationError of type
    `OperationRefused`, and no run starts.
    """
    parent = workflow.info().workflow_id
    run_id = child_run_id(parent, key)
    queue = task_queue or workflow.info().task_queue
    spec = for_new_run(spec.model_copy(update={"idempotency_key": f"{parent}~{key}"}))
    workflow.deprecate_patch(READS_POLICY)
    found = await workflow.execute_activity_method(
        AdmissionActivities.policy,
        PolicyInput(tenant=spec.tenant),
        task_queue=queue,
        start_to_close_timeout=POLICY_TIMEOUT,
        retry_policy=fairness.MIRROR_RETRY,  # retried until Postgres answers
    )
    refusal = found.limits.priority_refusal(spec.priority)
    if refusal is not None:
        raise ApplicationError(refusal, type=REFUSED, non_retryable=True)
    # The caller's spec may add approvers, never remove the tenant's; its weight and cap
    # are the tenant's, whatever the spec says.
    spec = held_spec(spec.model_copy(update={"admission": None}), found)
    held = spec.admission is not None
    handle = await workflow.start_child_workflow(
        AgentRunWorkflow.run,
        spec,
        id=run_id,
        task_queue=queue,
        id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        parent_close_policy=workflow.ParentClosePolicy.REQUEST_CANCEL,
        static_summary=f"{spec.agent or 'agent'} for {parent}",
        priority=fairness.run_priority(spec.priority, spec.tenant, spec.fairness_weight),
    )
    if held:
        # Once the run exists, it joins its tenant's queue and waits there for a slot.
        await workflow.execute_activity_method(
            AdmissionActivities.hold,
            HoldRequest(run_id=run_id, tenant=spec.tenant, task_queue=queue),
            task_queue=queue,
            start_to_close_timeout=POLICY_TIMEOUT,
            retry_policy=fairness.MIRROR_RETRY,
        )
    return await handle
