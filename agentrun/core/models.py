"""Every input and result that crosses a workflow or activity boundary, in one place.

Each workflow, activity, signal, update and query takes one model and returns one, so a
field can be added later without breaking runs already in flight.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from temporalio.contrib.workflow_streams import WorkflowStreamState

from agentrun.core.states import RunStatus

MAX_TASK_CHARS = 20_000
JsonDict = dict[str, Any]


class RiskLevel(StrEnum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"


RISK_ORDER = {RiskLevel.LOW: 0, RiskLevel.MEDIUM: 1, RiskLevel.HIGH: 2}


class Strict(BaseModel):
    """Run specs are user input: unknown fields are an error, not silently dropped."""

    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------- the run spec (user input)


class ModelSettings(Strict):
    model: str | None = Field(None, description="Model name; None means the worker's default.")
    provider: str | None = Field(
        None, description="a provider the worker names (AGENTRUN_PROVIDERS); None: its default"
    )
    temperature: float = Field(0.0, ge=0, le=2)
    max_tokens: int | None = Field(None, gt=0)


class Signer(Strict):
    """An approver identity: a name, the role and tenant it may decide for, its public key."""

    name: str = Field(min_length=1)
    role: str = Field(min_length=1)
    tenant: str | None = Field(None, description="None: any tenant's runs")
    public_key: str = Field(description="Ed25519 public key, base64 of its 32 raw bytes")
    key_id: str = Field(description="the key's fingerprint (agentrun.approval_signatures)")


class DecisionSignature(Strict):
    """An approver's Ed25519 signature over (run id, approval id, action hash, decision,
    edit or reason, time): agentrun.approval_signatures says exactly what is signed."""

    key_id: str
    approval_id: str
    signed_at: datetime
    signature: str = Field(description="base64")


class ApprovalPolicy(Strict):
    # Tool calls at or above this risk wait for a human; "always" names tools that always do.
    require_at_or_above: RiskLevel = RiskLevel.HIGH
    always: list[str] = Field(default_factory=list)
    default_role: str = "approver"
    roles: dict[str, str] = Field(default_factory=dict, description="tool name -> required role")
    approvers: list[str] = Field(default_factory=list, description="if set, only these may decide")
    timeout_seconds: float = Field(24 * 3600, gt=0)
    on_reject: Literal["cancel", "replan"] = "cancel"
    # Keyed approvers (`agentrun approvers add`, copied in when the run starts): with any,
    # only decisions signed by one of them apply. None and no require_signatures is the
    # single-user escape hatch: unsigned decisions, as anyone who reaches Temporal sends them.
    signers: list[Signer] = Field(default_factory=list)
    require_signatures: bool = False
    signature_max_age_seconds: float = Field(3600, gt=0, description="older signatures expire")

    def signatures_required(self) -> bool:
        return self.require_signatures or bool(self.signers)

    def needs_approval(self, tool: str, risk: RiskLevel) -> bool:
        return tool in self.always or RISK_ORDER[risk] >= RISK_ORDER[self.require_at_or_above]

    def role_for(self, tool: str) -> str:
        return self.roles.get(tool, self.default_role)


class Budget(Strict):
    max_tokens: int | None = Field(None, gt=0)
    max_cost_usd: float | None = Field(None, gt=0)


class StepTimeouts(Strict):
    model_seconds: float = Field(120, gt=0)
    tool_seconds: float = Field(300, gt=0)
    heartbeat_seconds: float = Field(30, gt=0)
    max_attempts: int = Field(5, ge=1)
    initial_retry_seconds: float = Field(1, gt=0)


class ToolPolicy(Strict):
    """Per-tool overrides of the run's retry settings."""

    max_attempts: int | None = Field(None, ge=1)
    timeout_seconds: float | None = Field(None, gt=0)


class FailurePolicy(Strict):
    """What the run does for each kind of failure. Every field's default is in the README."""

    fallback_model: str | None = Field(None, description="used when the model keeps failing")
    fallback_provider: str | None = Field(
        None, description="the fallback model's provider; None: the worker's default"
    )
    model_attempts_before_fallback: int = Field(3, ge=1)
    backoff_coefficient: float = Field(2.0, ge=1)
    max_retry_seconds: float = Field(60, gt=0)
    malformed_output_repairs: int = Field(1, ge=0, description="stricter re-asks, then fail")
    argument_repairs: int = Field(2, ge=0, description="re-asks after invalid tool arguments")
    on_permission_denied: Literal["pause", "fail"] = "pause"
    on_suspected_injection: Literal["quarantine", "fail", "allow"] = "quarantine"
    on_budget_exceeded: Literal["pause", "fail"] = "pause"
    tools: dict[str, ToolPolicy] = Field(default_factory=dict)


class CountCheck(Strict):
    """How many times a regular expression must match the answer (e.g. bullet lines)."""

    name: str
    pattern: str = Field(min_length=1)
    equals: int | None = Field(None, ge=0)
    at_least: int | None = Field(None, ge=0)


class JudgeSpec(Strict):
    """A narrow LLM-judge rubric, asked through the run's own model client."""

    rubric: str = Field(min_length=1, max_length=4000)
    model: str | None = Field(None, description="None: the worker's default model")


# The placeholder a model leaves in an answer it did not finish: by default the verify
# check fails an answer that holds it, and the model is asked again.
UNFINISHED_ANSWER_MARKER = "TODO"


class VerifySpec(Strict):
    required_sections: list[str] = Field(default_factory=lambda: ["## Summary"])
    # Text a final answer must not contain.
    forbidden: list[str] = Field(default_factory=lambda: [UNFINISHED_ANSWER_MARKER])
    min_chars: int = Field(1, ge=0)
    json_schema: JsonDict | None = Field(
        None, description="the answer's ```json block must validate against this schema"
    )
    counts: list[CountCheck] = Field(default_factory=list)
    judge: JudgeSpec | None = None
    max_rounds: int = Field(2, ge=1, description="answers the model may give in all")
    on_failure: Literal["retry", "fail"] = Field(
        "retry", description="retry: the model hears the failures, up to max_rounds"
    )


class RunSpec(Strict):
    """Everything a run needs, validated before anything starts."""

    task: str = Field(min_length=1, max_length=MAX_TASK_CHARS)
    agent: str = Field("default", min_length=1, max_length=200, description="who works on it")
    instructions: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_TASK_CHARS,
        description="the system message; None: the engine's default (an agent profile sets it)",
    )
    profile_hash: str | None = Field(
        None, max_length=64, description="the hash of the agent profile this spec came from"
    )
    tenant: str = Field("default", min_length=1, max_length=200)
    user: str = Field("anonymous", min_length=1, max_length=200)
    idempotency_key: str | None = Field(None, min_length=1, max_length=200)
    priority: int = Field(
        3, ge=1, le=5, description="1 runs first, 5 last; every step of the run inherits it"
    )
    model: ModelSettings = Field(default_factory=ModelSettings)
    allowed_tools: list[str] | None = Field(None, description="None: every tool the worker has")
    approval: ApprovalPolicy = Field(default_factory=ApprovalPolicy)
    max_steps: int = Field(20, ge=1, le=500)
    budget: Budget = Field(default_factory=Budget)
    timeouts: StepTimeouts = Field(default_factory=StepTimeouts)
    verify: VerifySpec = Field(default_factory=VerifySpec)
    failures: FailurePolicy = Field(default_factory=FailurePolicy)
    history_events_limit: int = Field(
        10_000, ge=100, description="continue as new past this many history events"
    )
    carry: RunProgress | None = Field(
        None, description="set by the engine when a run continues as new; never by people"
    )
    admission: str | None = Field(
        None, description="set by the engine: the tenant admission workflow that started it"
    )
    fork: ForkOrigin | None = Field(
        None, description="set by `agentrun fork`: the run and step this one starts from"
    )
    workflow_generation: int | None = Field(
        None,
        ge=1,
        description="set by the engine: the run workflow generation the run takes "
        "(agentrun/workflows/changes.py); None: an older run, which asks a patch marker",
    )
    fairness_weight: float | None = Field(
        None,
        gt=0,
        description="set by the engine (agentrun/ops/door.py): its tenant's weight, which a "
        "backlog starts the run with; whatever a spec says is replaced",
    )
    local_read_only_tools: bool = Field(
        False,
        description="a tool with no side effect and low risk runs as a local activity, in the "
        "workflow's own task: no task queue round trip, a marker in history; False: every "
        "tool call is an activity of its own",
    )


# ---------------------------------------------------------------- activity inputs and results


class Usage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0


class ArtifactRef(BaseModel):
    """Where a large output lives, instead of in Temporal's history."""

    artifact_id: str
    name: str
    media_type: str
    size_bytes: int
    preview: str = ""


class ModelCallInput(BaseModel):
    run_id: str
    step_id: str
    seq: int
    model: str | None
    new_messages: list[JsonDict] = Field(
        default_factory=list, description="messages added since the previous model call"
    )
    first_index: int = Field(0, description="position of new_messages[0] in the conversation")
    messages: list[JsonDict] | None = Field(
        None, description="the whole conversation, as inputs scheduled before the store carried"
    )
    allowed_tools: list[str] | None
    temperature: float = 0.0
    max_tokens: int | None = None
    heartbeat_seconds: float = 30
    timeout_seconds: float = 120
    mirror: MirrorBatch | None = Field(
        None, description="the run's pending mirror writes: applied with the step's claim"
    )
    checks: VerifySpec | None = Field(
        None,
        description="the run's answer checks, when no judge is among them: should the reply "
        "be a final answer, the activity returns their verdict (generation 3)",
    )
    tools_used: list[str] = Field(
        default_factory=list, description="tools that ran: their declared checks apply too"
    )
    provider: str | None = Field(
        None, description="the worker's named provider to call; None: its default client"
    )


class ProposedToolCall(BaseModel):
    """A tool call the model asked for, already checked against the worker's registry."""

    call_id: str
    tool: str
    arguments: JsonDict | None = None
    error: str | None = Field(None, description="why the call cannot run as proposed")
    error_kind: Literal["malformed", "invalid_arguments", "unknown_tool"] | None = None
    risk: RiskLevel = RiskLevel.LOW
    side_effect: bool = False
    parameters: JsonDict | None = Field(
        None, description="the tool's argument schema, to check an approver's edit against"
    )


class ModelCallResult(BaseModel):
    content: str | None
    tool_calls: list[ProposedToolCall] = Field(default_factory=list)
    assistant_message: JsonDict
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float = 0.0
    model: str
    attempt: int = 1
    journal_attempt: int = Field(1, description="the attempt that paid for this response")
    streamed_chars: int | None = Field(
        None,
        description="how much of `content` the activity already streamed to watchers; the "
        "workflow publishes the rest (None: an older activity that streamed it all itself)",
    )
    verdict: VerifyResult | None = Field(
        None, description="the answer's checks, for a final answer of a call that carried them"
    )
    priced: bool = Field(True, description="False: no price is known for the model")


class ToolCallInput(BaseModel):
    run_id: str
    step_id: str
    seq: int
    tool: str
    arguments: JsonDict
    idempotency_key: str
    checkpoint: JsonDict = Field(default_factory=dict)
    heartbeat_seconds: float = 30
    resolution: Literal["rerun", "skip"] | None = Field(
        None, description="a person's answer to an unknown outcome"
    )
    mirror: MirrorBatch | None = Field(
        None, description="the run's pending mirror writes: applied with the step's claim"
    )
    call_id: str | None = Field(None, description="the model's id for the call (for traces)")


class ToolCallResult(BaseModel):
    ok: bool
    output: Any = None
    error: str | None = None
    duplicate_prevented: bool = False
    checkpoint_patch: JsonDict = Field(default_factory=dict)
    attempt: int = 1
    suspicious: list[str] = Field(default_factory=list, description="injection patterns seen")
    unknown_outcome: bool = False
    reconciliation: str | None = None


class CheckpointInput(BaseModel):
    run_id: str
    step_id: str
    checkpoint: JsonDict
    fence: int | None = Field(
        None, description="history length when scheduled: a later mirror write wins"
    )


class VerifyInput(BaseModel):
    run_id: str
    step_id: str
    answer: str
    spec: VerifySpec
    tools_used: list[str] = Field(
        default_factory=list, description="tools that ran: their declared checks apply too"
    )


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


# ---------------------------------------------------------------- mirror records


StepType = Literal["model_call", "tool_call", "approval", "verify", "checkpoint"]


class StepRecord(BaseModel):
    """A step as the workflow accepted it; the mirror makes it final for `attempt` only."""

    step_id: str
    seq: int
    type: StepType
    name: str
    status: str
    input: JsonDict = Field(default_factory=dict)
    output: Any = None
    error: str | None = None
    attempt: int = 1
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    idempotency_key: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    final: bool = True


class RunEvent(BaseModel):
    seq: int
    type: str
    step_id: str | None = None
    data: JsonDict = Field(default_factory=dict)
    at: datetime


class RunSnapshot(BaseModel):
    run_id: str
    version: int = Field(description="grows with every change; older snapshots never win")
    agent: str = "default"
    profile_hash: str | None = None
    tenant: str
    user: str
    task: str
    priority: int | None = None
    status: RunStatus
    current_step_id: str | None = None
    pause_reason: str | None = None
    model: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    duplicates_prevented: int = 0
    checkpoint: JsonDict = Field(default_factory=dict)
    result: str | None = None
    error: str | None = None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None = None


class MirrorBatch(BaseModel):
    run: RunSnapshot
    steps: list[StepRecord] = Field(default_factory=list)
    events: list[RunEvent] = Field(default_factory=list)
    fence: int = Field(
        0, description="history length when written: a re-run of a lost workflow task wins"
    )


# ---------------------------------------------------------------- approvals


ApprovalKind = Literal["action", "quarantine", "budget", "unknown_outcome"]


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


class ApproveInput(BaseModel):
    action_hash: str
    by: str = Field(min_length=1)
    role: str = Field(min_length=1)
    edit: JsonDict | None = Field(None, description="arguments the approver changed")
    tenant: str | None = None
    signature: DecisionSignature | None = None


class RejectInput(BaseModel):
    action_hash: str
    by: str = Field(min_length=1)
    role: str = Field(min_length=1)
    reason: str = Field(min_length=1)
    tenant: str | None = None
    signature: DecisionSignature | None = None


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


class DecisionResult(BaseModel):
    approval_id: str
    decision: str
    status: RunStatus
    note: str | None = Field(None, description="what happens next, when not applied yet")


class ControlInput(BaseModel):
    by: str = "cli"
    reason: str | None = None


class ControlResult(BaseModel):
    status: RunStatus
    paused: bool
    message: str


# ---------------------------------------------------------------- queries and receipts


class StepSummary(BaseModel):
    step_id: str
    seq: int
    type: StepType
    name: str
    status: str
    attempt: int = 1


class DecisionSeen(BaseModel):
    approval_id: str
    decision: str
    by: str | None


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


class FinishInput(BaseModel):
    """Where a run ends: its last mirror batch and its receipt, for one activity to write
    (`mirror.finish`), the rows first since the receipt sums them up."""

    batch: MirrorBatch
    receipt: Receipt


class RunResult(BaseModel):
    run_id: str
    status: RunStatus
    answer: str | None
    error: str | None


class RunProgress(BaseModel):
    """Everything a run knows beyond its spec, declared once.

    The workflow keeps its state in one of these; it is carried whole across
    continue-as-new (`RunSpec.carry`), and the mirror snapshot, the `state` query and the
    receipt are projections of it (agentrun/workflows/run_state.py). Compact, since the
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


class ForkSeedInput(BaseModel):
    run_id: str
    origin: ForkOrigin
    allowed_tools: list[str] | None = None


class ForkSeed(BaseModel):
    """What `fork.seed` found and copied: the recorded steps before the fork point (the
    conversation they built is now the fork's), and the calls of step N's reply still to
    make: the edited one (run nowhere) and those the fork makes live."""

    steps: list[StepRecord]
    model_calls: int
    stored_messages: int
    edited_call: ProposedToolCall | None = None
    live_calls: list[ProposedToolCall] = Field(default_factory=list)
    inherited_effects: list[str] = Field(
        default_factory=list, description="the parent's effects before the fork point"
    )


RunSpec.model_rebuild()


# ---------------------------------------------------------------- watching, forking, deploys


class RunVersion(BaseModel):
    """The Worker Deployment version a run is on (all None for unversioned workers)."""

    run_id: str
    deployment_name: str | None
    build_id: str | None
    behavior: Literal["pinned", "auto_upgrade"] | None


class TextPiece(BaseModel):
    """A piece of a model's reply as the provider streams it (topic `text`)."""

    step_id: str
    attempt: int
    text: str


class RetryNote(BaseModel):
    """A step's attempt that is a retry, and why the one before it ended (topic `retries`)."""

    step_id: str
    attempt: int
    reason: str


class WatchItem(BaseModel):
    """One line of `agentrun watch --json`: an event, a piece of model text, or the receipt."""

    kind: Literal["event", "text", "receipt"]
    type: str = Field(description="the event's type; `model.text`; or `receipt`")
    offset: int | None = Field(None, description="position in the live stream; None: the mirror")
    seq: int | None = Field(None, description="the event's sequence number in the run")
    step_id: str | None = None
    data: JsonDict = Field(default_factory=dict)
    text: str | None = None
    at: datetime | None = None
