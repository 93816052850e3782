"""The types `agentledger.RunClient` takes and returns, and the parts of a `RunSpec`: public,
like the names `agentledger` exports. Every model here holds only types exported here.

    from agentledger.types import RunState, Started, VerifySpec

Importing this module loads only agentledger.core (pydantic's models, Temporal's types), not
the operations, the stores or the workflows (a test holds it to that), so a program that
types its calls loads no engine.
"""

from __future__ import annotations

from agentledger.core.access import Caller
from agentledger.core.admission_models import TenantLimits
from agentledger.core.approver_key import ApproverKey
from agentledger.core.backlog_models import (
    BacklogControlResult,
    EnqueueResult,
    PolicyPatch,
    RetryResult,
    TaskItem,
)
from agentledger.core.budgets import BudgetLimit, BudgetStatus
from agentledger.core.builds import BuildStatus, DeployStatus
from agentledger.core.eval_cases import (
    Divergence,
    RecordedApproval,
    RecordedCall,
    Recording,
    ToolUse,
)
from agentledger.core.eval_reports import CaseScore, EvalGate, EvalReport, EvalTotals
from agentledger.core.events import EventType
from agentledger.core.fleet_figures import ModelFailures, PruneResult, Stats, ToolFailures
from agentledger.core.hook_models import HookRow, HookStarted, NewHook
from agentledger.core.http_config import HttpConfig
from agentledger.core.identity import Identity
from agentledger.core.listings import (
    ApiKeyRow,
    BacklogListing,
    BacklogTaskRow,
    CostRow,
    DeadTask,
    EvidenceStep,
    InboxItem,
    MirroredStep,
    NewApiKey,
    RunRow,
    TenantRow,
    TenantShown,
    TimelineStep,
)
from agentledger.core.policy_rules import ApprovalRule, TenantPolicy
from agentledger.core.replay_verdicts import DeployCheck, ReplayVerdict
from agentledger.core.results import (
    ApprovalRecord,
    ApprovalVote,
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
    SandboxExecution,
    SayResult,
    SessionTurn,
    SideEffectRecord,
    StepSummary,
    TriggerOrigin,
    Usage,
    VerifyResult,
    WatchItem,
)
from agentledger.core.run_reports import (
    ActivityInFlight,
    MirrorCheck,
    RunReport,
    Started,
    WorkerSeen,
)
from agentledger.core.schedule_models import FireRecord, ScheduleRow, ScheduleView
from agentledger.core.spec import (
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
from agentledger.core.standing_approvals import StandingApproval
from agentledger.core.states import RunStatus, StepStatus
from agentledger.core.version_branches import BranchNeed, BranchUse, PatchInventory, VersionBranch
from agentledger.core.webhook_models import (
    NewSubscription,
    PushSubscription,
    StoredArtifact,
    WebhookDelivery,
)
from agentledger.profiles import Agent

__all__ = [
    "ActivityInFlight",
    "Agent",
    "ApiKeyRow",
    "ApprovalPolicy",
    "ApprovalRecord",
    "ApprovalRule",
    "ApprovalVote",
    "ApproverKey",
    "BacklogControlResult",
    "BacklogListing",
    "BacklogTaskRow",
    "BranchNeed",
    "BranchUse",
    "Budget",
    "BudgetLimit",
    "BudgetStatus",
    "BuildStatus",
    "Caller",
    "CaseScore",
    "CheckOutcome",
    "ChildApproval",
    "ControlResult",
    "CostRow",
    "CountCheck",
    "DeadTask",
    "DecisionResult",
    "DecisionSeen",
    "DeployCheck",
    "DeployStatus",
    "Divergence",
    "EnqueueResult",
    "EvalGate",
    "EvalReport",
    "EvalTotals",
    "EventType",
    "EvidenceStep",
    "FailurePolicy",
    "FireRecord",
    "ForkOrigin",
    "HookRow",
    "HookStarted",
    "HttpConfig",
    "Identity",
    "InboxItem",
    "JsonDict",
    "JudgeSpec",
    "LeftInMirror",
    "MirrorCheck",
    "MirroredStep",
    "ModelFailures",
    "ModelSettings",
    "NewApiKey",
    "NewHook",
    "NewSubscription",
    "PatchInventory",
    "PendingApproval",
    "PolicyPatch",
    "PruneResult",
    "PushSubscription",
    "Receipt",
    "RecordedApproval",
    "RecordedCall",
    "Recording",
    "RefusedDecision",
    "ReplayVerdict",
    "RetryRecord",
    "RetryResult",
    "RiskLevel",
    "RunMessage",
    "RunReport",
    "RunResult",
    "RunRow",
    "RunSpec",
    "RunState",
    "RunStatus",
    "RunVersion",
    "SandboxExecution",
    "SayResult",
    "ScheduleRow",
    "ScheduleView",
    "SessionSpec",
    "SessionTurn",
    "SideEffectRecord",
    "Signer",
    "StandingApproval",
    "Started",
    "Stats",
    "StepStatus",
    "StepSummary",
    "StepTimeouts",
    "StoredArtifact",
    "SubagentLimits",
    "TaskItem",
    "TenantLimits",
    "TenantPolicy",
    "TenantRow",
    "TenantShown",
    "TimelineStep",
    "ToolFailures",
    "ToolPolicy",
    "ToolUse",
    "TriggerOrigin",
    "Usage",
    "VerifyResult",
    "VerifySpec",
    "VersionBranch",
    "WatchItem",
    "WebhookDelivery",
    "WorkerSeen",
]
