"""The types `agentrun.RunClient` takes and returns: public, like the names `agentrun` exports.

    from agentrun.types import RunState, Started

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
from agentrun.core.models import (
    ControlResult,
    DecisionResult,
    JsonDict,
    PendingApproval,
    RunResult,
    RunSpec,
    RunState,
    RunVersion,
    Signer,
    WatchItem,
)
from agentrun.core.replay_verdicts import DeployCheck, ReplayVerdict
from agentrun.core.settings import Settings
from agentrun.core.version_branches import PatchInventory
from agentrun.ops.approver_keys import ApproverKey
from agentrun.ops.operations import RunReport, Started
from agentrun.profiles import Agent
from agentrun.store.metrics import Stats
from agentrun.store.retention import PruneResult

__all__ = [
    "Agent",
    "ApproverKey",
    "BacklogControlResult",
    "BuildStatus",
    "ControlResult",
    "DecisionResult",
    "DeployCheck",
    "DeployStatus",
    "EnqueueResult",
    "JsonDict",
    "PatchInventory",
    "PendingApproval",
    "PolicyPatch",
    "PruneResult",
    "ReplayVerdict",
    "RetryResult",
    "RunReport",
    "RunResult",
    "RunSpec",
    "RunState",
    "RunVersion",
    "Settings",
    "Signer",
    "Started",
    "Stats",
    "TaskItem",
    "TenantLimits",
    "WatchItem",
]
