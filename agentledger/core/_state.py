"""Private: what a run holds beyond its spec (`RunProgress`), and what its workflow starts
from (`RunInput`: the person's spec and what the engine sets).

Only the engine builds a `RunInput`: the start gate (`agentledger.client.starts`) for a start
or a fork, the admission queue, a backlog, `run_agent`, and the run itself when it continues as new.
A person's `RunSpec` cannot hold these fields, so nobody forges a carry, an admission, a
fork, a generation or a weight. The fields sit after the spec's, as they always did in the
workflow's input, so every recorded history still reads.
"""

from __future__ import annotations

from datetime import datetime
from typing import Self

from pydantic import BaseModel, Field
from temporalio.contrib.workflow_streams import WorkflowStreamState

from agentledger.core.identity import Identity
from agentledger.core.policy_rules import TenantPolicy
from agentledger.core.results import (
    ApprovalRecord,
    ChildApproval,
    ForkOrigin,
    LeftInMirror,
    PendingApproval,
    RefusedDecision,
    RunMessage,
    SessionTurn,
    SideEffectRecord,
    StepSummary,
    TriggerOrigin,
    VerifyResult,
)
from agentledger.core.spec import Budget, JsonDict, RunSpec
from agentledger.core.states import RunStatus
from agentledger.core.wire import ApproveInput, Charge, RejectInput


class RunProgress(BaseModel):
    """Everything a run knows beyond its spec, declared once.

    The workflow keeps its state in one of these; it is carried whole across
    continue-as-new (`RunInput.carry`), and the mirror snapshot, the `state` query and the
    receipt are projections of it (agentledger.workflows.run_state). Compact, since the
    conversation and large outputs live in Postgres. Every field has a default, so carries
    written before a field existed still load.
    """

    generation: int = Field(0, description="how many times the run has continued as new")
    status: RunStatus = RunStatus.QUEUED
    started_at: datetime
    finished_at: datetime | None = None
    seq: int = Field(0, description="the last step's number")
    version: int = Field(0, description="the last mirror snapshot's version")
    event_seq: int = 0
    current_step_id: str | None = None
    model_calls: int = 0
    verify_rounds: int = 0
    steps: list[StepSummary] = Field(default_factory=list)
    stored_messages: int = Field(0, description="how much of the conversation the store holds")
    pending_messages: list[JsonDict] = Field(
        default_factory=list, description="messages the conversation store does not hold yet"
    )
    model_used: str | None = None
    model_choice: int = Field(0, description="0: the primary model; 1: the fallback")
    checkpoint: JsonDict = Field(default_factory=dict)
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    unpriced_models: list[str] = Field(
        default_factory=list, description="models called with no known price"
    )
    duplicates_prevented: int = 0
    side_effects: list[SideEffectRecord] = Field(default_factory=list)
    inherited_effects: list[str] = Field(
        default_factory=list,
        description="a fork's: the content (keys.effect_content) of each effect its parent "
        "made before the fork point, counted when the fork keys an identical call",
    )
    approvals: list[ApprovalRecord] = Field(default_factory=list)
    pending_approval: PendingApproval | None = None
    decision: ApproveInput | RejectInput | None = Field(
        None, description="a person's decision on the pending approval, not yet applied"
    )
    refusals: list[RefusedDecision] = Field(
        default_factory=list, description="the last decisions refused on applying them"
    )
    pause_requested: bool = False
    pause_reason: str | None = None
    admitted: bool = Field(
        True, description="False only while the run waits for a slot of its tenant's cap"
    )
    verification: VerifyResult | None = None
    unresolved: list[str] = Field(default_factory=list)
    budget: Budget = Field(default_factory=Budget)
    malformed_streak: int = 0
    argument_streak: int = 0
    answer: str | None = None
    error: str | None = None
    stream_state: WorkflowStreamState | None = Field(
        None, description="set at continue-as-new: the live stream's log (its tail) for watchers"
    )
    messages: list[RunMessage] = Field(
        default_factory=list, description="messages said to the run (`agentledger say`)"
    )
    children: list[str] = Field(default_factory=list, description="its sub-agents' runs")

    def spend(self, tokens_in: int, tokens_out: int, cost_usd: float) -> None:
        """Count what one model call, judge or sub-agent run used."""
        self.tokens_in += tokens_in
        self.tokens_out += tokens_out
        self.cost_usd = round(self.cost_usd + cost_usd, 6)

    child_approvals: list[ChildApproval] = Field(
        default_factory=list, description="approvals its sub-agents' runs wait for"
    )
    # A session's (spec `session`; agentledger.workflows.sessions).
    turns: list[SessionTurn] = Field(default_factory=list, description="a session's turns")
    turn_start: tuple[int, int, float] = Field(
        (0, 0, 0.0), description="model calls, tokens and cost before the open turn began"
    )
    idle_since: datetime | None = Field(None, description="when the last turn answered")
    summary: str | None = Field(None, description="the summary of a session's older turns")
    summary_keeps_from: int = Field(
        0, description="the conversation position the model reads word for word from"
    )
    summarised_turns: int = Field(0, description="turns the summary covers")
    compacted_at_turn: int = Field(0, description="the turn count at the last compaction")
    summaries: int = Field(0, description="summary model calls made")
    left_in_mirror: LeftInMirror = Field(
        default_factory=LeftInMirror,
        description="a session's oldest turns, messages and steps, dropped from the carry",
    )
    forgotten: list[tuple[int, int]] = Field(
        default_factory=list,
        description="a session's rolled-back turns: conversation positions [start, end) the "
        "model no longer reads",
    )
    paused_by: str | None = Field(None, description="who asked for the pause in force")
    end_requested_by: str | None = Field(
        None, description="who asked a session to end (`agentledger end`); None: nobody has"
    )
    model_calls_rated: bool = Field(
        False,
        description="its model calls go through the rate-limited model queue (its tenant has "
        "a model-call rate); False: on the run's own queue (generation 6)",
    )


class RunInput(RunSpec):
    """What `AgentRunWorkflow.run` takes: a run spec and what the engine sets on it."""

    carry: RunProgress | None = Field(
        None, description="set by the engine when a run continues as new; never by people"
    )
    admission: str | None = Field(
        None, description="set by the engine: the tenant admission workflow that started it"
    )
    fork: ForkOrigin | None = Field(
        None, description="set by `agentledger fork`: the run and step this one starts from"
    )
    workflow_generation: int | None = Field(
        None,
        ge=1,
        description="set by the engine: the run workflow generation the run takes, so a "
        "replay takes the paths it took; None: a run of generation 2 or before, refused",
    )
    fairness_weight: float | None = Field(
        None,
        gt=0,
        description="set by the engine when it starts the run: its tenant's weight, "
        "which a backlog starts the run with; whatever a spec says is replaced",
    )
    parent_run_id: str | None = Field(
        None, description="set by the engine: the run whose sub-agent this run is"
    )
    subagent_depth: int = Field(0, ge=0, description="set by the engine: sub-agents above it")
    charged_to: str | None = Field(
        None,
        description="set by the engine: the credential whose budgets the run's spend counts "
        "against beside its tenant's (the starter's; a sub-agent's: its parent's)",
    )
    trigger: TriggerOrigin | None = Field(
        None, description="set by the engine: the schedule fire or webhook delivery that started it"
    )
    requester: Identity | None = Field(
        None,
        description="set by the engine: who asked for the run, as their credential proved it "
        "(a sub-agent's, a backlog task's: whoever asked for its parent or task); None: runs "
        "started before it was recorded",
    )
    tenant_policy: TenantPolicy | None = Field(
        None,
        description="set by the engine: its tenant's policy when it started, which its "
        "sub-agents' runs start under too",
    )
    model_calls_rated: bool = Field(
        False,
        description="set by the engine when it starts the run: its tenant had a model-call "
        "rate then, so its model calls go through the rate-limited queue",
    )

    @classmethod
    def of(cls, spec: RunSpec, **engine: object) -> Self:
        """`spec` as the engine starts it, with the engine's fields given: those not given
        are None, or, for a `spec` that is a `RunInput` already, as it has them."""
        given = {name: getattr(spec, name) for name in spec.model_fields_set}
        return cls.model_validate({**given, **engine})

    def charge(self) -> Charge:
        """Whom the run's model calls are charged to (agentledger.core.budgets)."""
        return Charge(tenant=self.tenant, charged_to=self.charged_to, agent=self.agent)

    def spec(self) -> RunSpec:
        """The person's part: the spec without what the engine set."""
        given = self.model_fields_set & RunSpec.model_fields.keys()
        return RunSpec.model_validate({name: getattr(self, name) for name in given})
