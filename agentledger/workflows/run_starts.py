"""The one way a workflow starts an agent run: as its child, under the run's tenant's policy.

Every run a workflow starts (a sub-agent's, `run_agent`'s, a backlog task's, a capped
tenant's queued start) is started by `start_run`, which takes only a `PolicyApplied`: a run
input carrying its tenant's policy, resolved by the one function every start uses
(`agentledger.core.tenant_policy.resolve`). Each way to get one names where the policy came
from:
- `read_policy`: read from Postgres now (activity `tenants.policy`): the tenant's approvers
  (a spec may add its own, never remove the tenant's) and weight, a refusal of a priority
  the tenant may not take or while an enforcing budget is spent (the tenant's, or the
  credential's the run is charged to), and for a capped tenant a place in its queue (the
  run joins it once started, activity `admission.hold`, and waits there for a slot);
- `from_gate`: a spec the start gate built from the policy it read
  (agentledger.client.starts): the admission queue's starts, and the tasks of backlogs
  recorded before they read it;
- `within_parent`: a sub-agent's run, under the policy its parent carries (the start gate's read,
  or `read_policy`'s, all the way up): the tenant's rules, the parent's approvers, weight,
  priority and requester. It runs
  in its parent's slot of a capped tenant (the parent does nothing while its child runs), so
  it does not queue: under a cap of one, it would wait forever behind its own parent.
Each is started at its tenant's fairness key and weight, and (but the start gate's, which has it
already) with the generation of the code starting it (`for_new_run`).
A test fails if a workflow module starts a child workflow any other way,
so the next way to start a run cannot skip the policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributes, TypedSearchAttributes, WorkflowIDReusePolicy

with workflow.unsafe.imports_passed_through():
    from agentledger.activities.admission import AdmissionActivities
    from agentledger.core import constants as names
    from agentledger.core import fairness
    from agentledger.core._state import RunInput
    from agentledger.core.admission_models import HoldRequest, TenantLimits
    from agentledger.core.policy_rules import TenantPolicy
    from agentledger.core.results import RunResult
    from agentledger.core.spec import RunSpec
    from agentledger.core.tenant_policy import PolicyInput, RunPolicy, held_spec, resolve
    from agentledger.workflows.changes import for_new_run

POLICY_TIMEOUT = timedelta(seconds=30)


@dataclass(frozen=True)
class PolicyApplied:
    """A run's input that carries its tenant's policy; only this module's functions make one."""

    spec: RunInput
    held: bool = False  # joins its tenant's queue once started, and waits there for a slot


async def read_policy(spec: RunSpec, *, task_queue: str | None = None) -> PolicyApplied | str:
    """`spec` under its tenant's policy as Postgres holds it now, or why it may not start.
    Its cap and weight are the tenant's, whatever the spec says."""
    charged_to = spec.charged_to if isinstance(spec, RunInput) else None
    found = await workflow.execute_activity_method(
        AdmissionActivities.policy,
        PolicyInput(tenant=spec.tenant, charged_to=charged_to),
        task_queue=task_queue or workflow.info().task_queue,
        start_to_close_timeout=POLICY_TIMEOUT,
        retry_policy=fairness.MIRROR_RETRY,  # retried until Postgres answers
    )
    refusal = found.limits.priority_refusal(spec.priority) or found.budget_refusal
    if refusal is not None:
        return refusal
    run = held_spec(for_new_run(spec).model_copy(update={"admission": None}), found)
    return PolicyApplied(run, held=run.admission is not None)


def from_gate(spec: RunInput) -> PolicyApplied:
    """A spec the start gate built from its tenant's policy (agentledger.client.starts,
    `resolve`), with the generation the start gate gave it."""
    return PolicyApplied(spec)


def within_parent(parent: RunInput, child: RunInput) -> PolicyApplied:
    """A sub-agent's run under its parent's policy: the parent's tenant, priority, weight,
    requester and model-call rate, the parent's approvers beside any the child's agent names,
    and the tenant's policy the parent started under (`resolve`, as every start)."""
    found = RunPolicy(
        limits=TenantLimits(tenant=parent.tenant, weight=parent.fairness_weight or 1.0),
        signers=parent.approval.signers,
        tenant_policy=parent.tenant_policy or TenantPolicy(),
    )
    placed = child.model_copy(
        update={"tenant": parent.tenant, "priority": parent.priority, "admission": None}
    )
    run = resolve(placed, found, requester=parent.requester).model_copy(
        update={
            "model_calls_rated": parent.model_calls_rated,
            "charged_to": parent.charged_to,  # its spend rolls up to the parent's credential
        }
    )
    if parent.fairness_weight is None:  # a parent started before it carried its weight
        run = run.model_copy(update={"fairness_weight": None})
    return PolicyApplied(for_new_run(run))


async def start_run(
    run: PolicyApplied,
    *,
    run_id: str,
    summary: str | None = None,
    task_queue: str | None = None,
    parent_close_policy: workflow.ParentClosePolicy = workflow.ParentClosePolicy.REQUEST_CANCEL,
    search_attributes: TypedSearchAttributes | SearchAttributes | None = None,
) -> workflow.ChildWorkflowHandle[Any, RunResult]:
    """Start the run as this workflow's child, at its tenant's fairness key and weight; a
    held run joins its tenant's queue once it exists (an admit sent before would find no
    run). The same id is never started twice (WorkflowAlreadyStartedError)."""
    spec = run.spec
    queue = task_queue or workflow.info().task_queue
    handle = await workflow.start_child_workflow(
        names.WORKFLOW_NAME,
        spec,
        id=run_id,
        result_type=RunResult,
        task_queue=queue,
        id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        parent_close_policy=parent_close_policy,
        static_summary=summary,
        priority=fairness.run_priority(spec.priority, spec.tenant, spec.fairness_weight),
        search_attributes=search_attributes,
    )
    if run.held:
        await workflow.execute_activity_method(
            AdmissionActivities.hold,
            HoldRequest(run_id=run_id, tenant=spec.tenant, task_queue=queue),
            task_queue=queue,
            start_to_close_timeout=POLICY_TIMEOUT,
            retry_policy=fairness.MIRROR_RETRY,
        )
    return handle
