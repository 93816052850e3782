"""The engine's workflows, as every worker registers them and every replay loads them, and
the workflow sandbox they run in: what a worker, the plugin, `deploy check` and the replay
tests share, so none of them can drift from the others. Workflow code never imports this
module; it is read where workers and replayers are built."""

from __future__ import annotations

from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from agentledger.workflows.admission import TenantAdmissionWorkflow
from agentledger.workflows.agent_run import AgentRunWorkflow
from agentledger.workflows.backlog import AgentBacklogWorkflow
from agentledger.workflows.budget_alerts import BudgetAlertWorkflow
from agentledger.workflows.evals import EvalWorkflow
from agentledger.workflows.redeliveries import RedeliveryWorkflow
from agentledger.workflows.run_notifier import RunNotifierWorkflow
from agentledger.workflows.scheduled_fires import ScheduledFireWorkflow
from agentledger.workflows.task_notifier import TaskNotifierWorkflow

# Every workflow the engine's worker registers (a deployment adds its own beside them).
ENGINE_WORKFLOWS: list[type] = [
    AgentRunWorkflow,
    AgentBacklogWorkflow,
    TenantAdmissionWorkflow,
    EvalWorkflow,
    TaskNotifierWorkflow,
    BudgetAlertWorkflow,
    ScheduledFireWorkflow,
    RunNotifierWorkflow,
    RedeliveryWorkflow,
]

# What the workflow sandbox shares with the worker instead of importing afresh for every run,
# each with its reason. Only the pure core: workflow code imports nothing else of ours but
# activity stubs, and those (with workflows.policies) come in through
# `workflow.unsafe.imports_passed_through()` where they are imported. Workflow files stay
# sandboxed, so the sandbox still catches a non-deterministic call in workflow code.
SANDBOX_PASSTHROUGH = (
    # Models, states, errors, keys, constants: deterministic and free of side effects, and
    # their pydantic classes must be the same objects inside and outside the sandbox.
    "agentledger.core",
    # A native (Rust) extension cannot be imported twice in one process: approval
    # signatures are verified in workflow code with the worker's one copy.
    "cryptography",
)


def sandboxed_runner() -> SandboxedWorkflowRunner:
    """The SDK's sandbox sharing SANDBOX_PASSTHROUGH with the process: workers run the
    engine's workflows in it, and replays (deploy check, the replay tests) replay them in it."""
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*SANDBOX_PASSTHROUGH)
    )
