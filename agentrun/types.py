"""The types `agentrun.RunClient` takes and returns, and the parts of a `RunSpec`: public,
like the names `agentrun` exports. Every model here holds only types exported here.

    from agentrun.types import RunState, Started, VerifySpec

Importing this module loads the client's models (pydantic, Temporal's), not a worker.
"""

from __future__ import annotations

from agentrun.core.admission_models import TenantLimits
from agentrun.core.backlog_models import (
    BacklogControlResult,
    EnqueueResult,
    PolicyPatch,
    RetryResult,
    TaskItem,
)
from agentrun.core.builds import BuildStatus, DeployStatus
from agentrun.core.replay_verdicts import DeployCheck, ReplayVerdict
from agentrun.core.results import (
    ApprovalRecord,
    CheckOutcome,
    ChildApproval,
    ControlResult,
    DecisionResult,
    DecisionSeen,
    ForkOrigin,
    LeftInMirror,
    PendingApproval,
    Receipt,
    RefusedDecision,
    RetryRecord,
    RunMessage,
    RunResult,
    RunState,
    RunVersion,
    SayResult,
    SessionTurn,
    SideEffectRecord,
    StepSummary,
    Usage,
    VerifyResult,
    WatchItem,
)
from agentrun.core.settings import Settings
from agentrun.core.spec import (
    ApprovalPolicy,
    Budget,
    CountCheck,
    FailurePolicy,
    JsonDict,
    JudgeSpec,
    ModelSettings,
    RiskLevel,
    RunSpec,
    SessionSpec,
    Signer,
    StepTimeouts,
    SubagentLimits,
    ToolPolicy,
    VerifySpec,
)
from agentrun.core.states import RunStatus
from agentrun.core.version_branches import BranchNeed, BranchUse, PatchInventory, VersionBranch
from agentrun.ops.approver_keys import ApproverKey
from agentrun.ops.in_flight import ActivityInFlight
from agentrun.ops.operations import RunReport, Started, WorkerSeen
from agentrun.profiles import Agent
from agentrun.store.metrics import ModelFailures, Stats, ToolFailures
from agentrun.store.retention import PruneResult

__all__ = [
    "ActivityInFlight",
    "Agent",
    "ApprovalPolicy",
    "ApprovalRecord",
    "ApproverKey",
    "BacklogControlResult",
    "BranchNeed",
    "BranchUse",
    "Budget",
    "BuildStatus",
    "CheckOutcome",
    "ChildApproval",
    "ControlResult",
    "CountCheck",
    "DecisionResult",
    "DecisionSeen",
    "DeployCheck",
    "DeployStatus",
    "EnqueueResult",
    "FailurePolicy",
    "ForkOrigin",
    "JsonDict",
    "JudgeSpec",
    "LeftInMirror",
    "ModelFailures",
    "ModelSettings",
    "PatchInventory",
    "PendingApproval",
    "PolicyPatch",
    "PruneResult",
    "Receipt",
    "RefusedDecision",
    "ReplayVerdict",
    "RetryRecord",
    "RetryResult",
    "RiskLevel",
    "RunMessage",
    "RunReport",
    "RunResult",
    "RunSpec",
    "RunState",
    "RunStatus",
    "RunVersion",
    "SayResult",
    "SessionSpec",
    "SessionTurn",
    "Settings",
    "SideEffectRecord",
    "Signer",
    "Started",
    "Stats",
    "StepSummary",
    "StepTimeouts",
    "SubagentLimits",
    "TaskItem",
    "TenantLimits",
    "ToolFailures",
    "ToolPolicy",
    "Usage",
    "VerifyResult",
    "VerifySpec",
    "VersionBranch",
    "WatchItem",
    "WorkerSeen",
]
