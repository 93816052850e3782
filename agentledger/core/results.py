"""What `RunClient` returns about a run: its state, its pending approval, its receipt and
the decisions and controls sent to it. Public; the workflow's queries and updates answer
with these types.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from agentledger.core.spec import JsonDict, Strict
from agentledger.core.states import RunStatus

StepType = Literal["model_call", "tool_call", "approval", "verify", "checkpoint"]


ApprovalKind = Literal["action", "quarantine", "budget", "unknown_outcome"]


class Usage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0


class CheckOutcome(BaseModel):
    name: str
    passed: bool
    detail: str = ""


class VerifyResult(BaseModel):
    passed: bool
    checks: list[CheckOutcome]
    judge_model: str | None = Field(None, description="the model that judged, if one did")
    usage: Usage = Field(default_factory=Usage, description="the judge's tokens")
    cost_usd: float = 0.0
    journal_attempt: int | None = Field(
        None, description="the attempt that paid for the judge's response (model_journal)"
    )

    @property
    def failures(self) -> list[str]:
        return [f"{c.name}: {c.detail}" for c in self.checks if not c.passed]


class StepSummary(BaseModel):
    step_id: str
    seq: int
    type: StepType
    name: str
    status: str
    attempt: int = 1


class PendingApproval(BaseModel):
    """What a person is asked to decide. `kind` says what approving means."""

    kind: ApprovalKind = "action"
    reason: str | None = None
    approval_id: str
    step_id: str
    tool: str
    arguments: JsonDict
    action_hash: str = Field(description="binds a decision to this exact tool call")
    required_role: str
    approvers: list[str] = Field(default_factory=list)
    tenant: str
    requested_at: datetime
    expires_at: datetime
    parameters: JsonDict | None = Field(
        None, description="the tool's argument schema: an edit must leave arguments it accepts"
    )
    risk: str | None = Field(
        None, description="the tool's risk (low, medium, high) for an action; None otherwise"
    )


class ChildApproval(BaseModel):
    """An approval one of a run's sub-agent runs waits for: decide it on that run."""

    run_id: str = Field(description="the sub-agent's run: approve or reject it there")
    approval: PendingApproval


class ApprovalRecord(BaseModel):
    kind: ApprovalKind = "action"
    approval_id: str
    tool: str
    proposed_arguments: JsonDict
    decision: Literal["approved", "rejected", "expired"]
    by: str | None = None
    role: str | None = None
    edit: JsonDict | None = None
    final_arguments: JsonDict | None = None
    reason: str | None = None
    requested_at: datetime
    decided_at: datetime
    key_id: str | None = Field(None, description="the key whose signature the run verified")


class RefusedDecision(BaseModel):
    """A decision the run refused when it applied it (a signal, or a signature that failed),
    kept so `status` can say why nothing happened."""

    approval_id: str | None
    by: str
    reason: str
    at: datetime


class DecisionSeen(BaseModel):
    approval_id: str
    decision: str
    by: str | None


class DecisionResult(BaseModel):
    approval_id: str
    decision: str
    status: RunStatus
    note: str | None = Field(None, description="what happens next, when not applied yet")


class RunMessage(BaseModel):
    """A message said to the run, and when the run took it (None: not yet)."""

    message_id: str
    text: str
    by: str
    received_at: datetime
    taken_at: datetime | None = None
    taken_before_step: int | None = Field(
        None, description="the number of the model call step that first read it"
    )
    interrupted_step: str | None = Field(
        None, description="the model call it cancelled (on_message: interrupt)"
    )


class SessionTurn(BaseModel):
    """One turn of a session (spec `session`): what was asked, what it answered, and what
    that took. Kept small (excerpts) in the run's state; the full text is in the mirror
    (the `conversation` table, and each model call step's output)."""

    turn: int = Field(ge=1)
    message_ids: list[str] = Field(
        default_factory=list, description="the messages it answered (none: the run's task)"
    )
    asked: str | None = Field(None, description="the message's text, cut to 2,000 characters")
    answer: str | None = Field(None, description="its answer, cut to 2,000 characters")
    answer_chars: int = 0
    first_step: int = Field(description="its first step's number")
    last_step: int | None = Field(None, description="its last step's number; None: in progress")
    model_calls: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    started_at: datetime
    answered_at: datetime | None = None
    first_message: int = Field(
        0, description="where its user message sits in the conversation (for compaction)"
    )


class LeftInMirror(BaseModel):
    """What a long session no longer carries in its state: its oldest turns, messages and
    steps, counted here. Each is whole in the mirror (`agentledger events`, the `steps` and
    `conversation` tables), so the state a continuation carries stays bounded."""

    turns: int = 0
    messages: int = 0
    steps: int = 0


class SayResult(BaseModel):
    run_id: str
    message_id: str
    status: RunStatus
    delivered: Literal["accepted", "recorded"] = Field(
        description="accepted: a worker holds the run and has it; recorded: the server keeps "
        "it in the run's history until a worker takes the run"
    )
    note: str


class ControlResult(BaseModel):
    status: RunStatus
    paused: bool
    message: str


class RunState(BaseModel):
    run_id: str
    status: RunStatus
    tenant: str
    user: str
    task: str
    current_step_id: str | None
    steps: list[StepSummary]
    pending_approval: PendingApproval | None
    pause_requested: bool
    pause_reason: str | None = None
    checkpoint: JsonDict
    tokens_in: int
    tokens_out: int
    cost_usd: float
    result: str | None
    error: str | None
    priority: int | None = None
    admission: str | None = Field(None, description="the admission workflow it waits in")
    queue_position: int | None = Field(None, description="1-based, while it waits for a slot")
    refusals: list[RefusedDecision] = Field(
        default_factory=list, description="decisions refused when the run applied them"
    )
    decided: list[DecisionSeen] = Field(
        default_factory=list,
        description="the last approvals decided, and by whom: how a decision sent as a signal "
        "learns it was the one applied",
    )
    children: list[str] = Field(
        default_factory=list, description="its sub-agents' runs (`status` each for theirs)"
    )
    child_approvals: list[ChildApproval] = Field(
        default_factory=list,
        description="approvals its sub-agents' runs (and theirs) wait for, each with its run",
    )
    messages: list[RunMessage] = Field(
        default_factory=list, description="messages said to the run, and when each was taken"
    )
    turns: list[SessionTurn] = Field(
        default_factory=list, description="a session's turns (spec `session`), oldest first"
    )
    left_in_mirror: LeftInMirror = Field(
        default_factory=LeftInMirror, description="a long session's, before those listed"
    )


# A side effect whose call the run was cancelled in: the receipt asks the ledger.
INTERRUPTED = "interrupted by the run's cancellation"


class SideEffectRecord(BaseModel):
    step_id: str
    tool: str
    idempotency_key: str
    arguments: JsonDict
    ok: bool
    duplicate_prevented: bool
    reconciliation: str | None = None
    output: Any = None


class RetryRecord(BaseModel):
    step_id: str
    attempts: int
    reason: str


class ForkOrigin(Strict):
    """Where a fork starts: steps before `from_step` are taken as `parent_run_id` recorded
    them; step `from_step` uses `edit_output` if given, else runs live; the rest runs live."""

    parent_run_id: str = Field(min_length=1)
    from_step: int = Field(ge=1)
    edit_output: Any = None
    effect_scope: str | None = Field(
        None,
        description="whose effects the fork's are: the parent's scope, so that a call the "
        "parent made finds its ledger row (None: forks from before it, scoped by their id)",
    )


class SandboxExecution(BaseModel):
    """A `run_code` step and the image digest it ran on, so a receipt says what code ran."""

    step_id: str
    attempt: int
    image: str | None
    image_digest: str | None
    status: str | None
    exit_code: int | None


class Receipt(BaseModel):
    run_id: str
    agent: str = "default"
    profile_hash: str | None = None
    task: str
    tenant: str
    user: str
    outcome: RunStatus
    answer: str | None
    error: str | None
    steps: list[StepSummary]
    side_effects: list[SideEffectRecord]
    approvals: list[ApprovalRecord]
    retries: list[RetryRecord]
    duplicates_prevented: int
    tokens_in: int
    tokens_out: int
    cost_usd: float
    unaccepted_tokens: int = Field(0, description="paid for on attempts the run did not use")
    unaccepted_cost_usd: float = 0.0
    unpriced_models: list[str] = Field(
        default_factory=list, description="models with no known price: cost_usd leaves them out"
    )
    verification: VerifyResult | None
    unresolved: list[str]
    started_at: datetime
    finished_at: datetime
    forked_from: ForkOrigin | None = None
    forks: list[str] = Field(
        default_factory=list, description="runs forked from this one (filled when read)"
    )
    parent_run_id: str | None = Field(None, description="the run it is a sub-agent of")
    children: list[str] = Field(default_factory=list, description="its sub-agents' runs")
    messages: list[RunMessage] = Field(
        default_factory=list, description="messages said to the run, and when each was taken"
    )
    turns: list[SessionTurn] = Field(
        default_factory=list, description="a session's turns, one section each (spec `session`)"
    )
    summaries: int = Field(0, description="how many times a session's older turns were summarised")
    left_in_mirror: LeftInMirror = Field(
        default_factory=LeftInMirror, description="a long session's, before those listed"
    )
    sandbox_executions: list[SandboxExecution] = Field(
        default_factory=list, description="each `run_code` step and its image (filled when read)"
    )


class RunResult(BaseModel):
    run_id: str
    status: RunStatus
    answer: str | None
    error: str | None
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0


class RunVersion(BaseModel):
    """The Worker Deployment version a run is on (all None for unversioned workers)."""

    run_id: str
    deployment_name: str | None
    build_id: str | None
    behavior: Literal["pinned", "auto_upgrade"] | None


class WatchItem(BaseModel):
    """One line of `agentledger watch --json`: an event, a piece of model text, the mark that
    a retried model call's text replaces what its step showed so far, or the receipt."""

    kind: Literal["event", "text", "text_reset", "receipt"]
    type: str = Field(
        description="the event's type; `model.text`; `model.text_reset` (the step's text so "
        "far is void: the retry's follows); or `receipt`"
    )
    offset: int | None = Field(None, description="position in the live stream; None: the mirror")
    seq: int | None = Field(None, description="the event's sequence number in the run")
    step_id: str | None = None
    data: JsonDict = Field(default_factory=dict)
    text: str | None = None
    at: datetime | None = None
