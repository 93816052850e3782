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
from agentrun.core.models import (
    ControlResult,
    DecisionResult,
    JsonDict,
    PendingApproval,
    RunMessage,
    RunResult,
    RunSpec,
    RunState,
    RunVersion,
    SayResult,
    Signer,
    WatchItem,
)
from agentrun.core.replay_verdicts import DeployCheck, ReplayVerdict
from agentrun.core.settings import Settings
from agentrun.ops.approver_keys import ApproverKey
from agentrun.ops.operations import RunReport, Started
from agentrun.profiles import Agent
from agentrun.store.metrics import Stats
from agentrun.store.retention import PruneResult

__all__ = [
    "Agent",
    "ApproverKey",
    "BacklogControlResult",
    "ControlResult",
    "DecisionResult",
    "DeployCheck",
    "EnqueueResult",
    "JsonDict",
    "PendingApproval",
    "PolicyPatch",
    "PruneResult",
    "ReplayVerdict",
    "RetryResult",
    "RunMessage",
    "RunReport",
    "RunResult",
    "RunSpec",
    "RunState",
    "RunVersion",
    "SayResult",
    "Settings",
    "Signer",
    "Started",
    "Stats",
    "TaskItem",
    "TenantLimits",
    "WatchItem",
]
