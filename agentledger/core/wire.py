"""What crosses the wire between the engine's parts: every input and result of an activity,
the signals and updates a run takes, and the rows it hands the mirror. Each activity,
signal and update takes one model and returns one, so a field can be added later without
breaking runs already in flight. The client, the workflows and the activities all use
these; a user's code does not (`agentledger.types` is the public API), so they may change
with the engine.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from agentledger.core.constants import FREE_FORM_AGENT, DoubleTexting
from agentledger.core.events import EventType
from agentledger.core.identity import Identity
from agentledger.core.results import (
    ForkOrigin,
    PendingApproval,
    Receipt,
    StepType,
    Usage,
    VerifyResult,
)
from agentledger.core.spec import JsonDict, RiskLevel, Strict, VerifySpec, waits_for_approver
from agentledger.core.states import RunStatus, StepStatus


class ArtifactRef(BaseModel):
    """Where a large output lives, instead of in Temporal's history."""

    artifact_id: str
    name: str
    media_type: str
    size_bytes: int
    preview: str = ""


class StepRecord(BaseModel):
    """A step as the workflow accepted it; the mirror makes it final for `attempt` only."""

    step_id: str
    seq: int
    type: StepType
    name: str
    status: StepStatus
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
    type: EventType
    step_id: str | None = None
    data: JsonDict = Field(default_factory=dict)
    at: datetime


class RunSnapshot(BaseModel):
    run_id: str
    version: int = Field(description="grows with every change; older snapshots never win")
    agent: str = FREE_FORM_AGENT
    profile_hash: str | None = None
    tenant: str
    user: str
    requester: Identity | None = None
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


class ConversationCut(BaseModel):
    """A session's compacted conversation: the model reads the first message (the system
    message), the summary, then the conversation from `keep_from` on. The store keeps it all."""

    summary: str
    keep_from: int = Field(ge=1)


class SummaryRequest(BaseModel):
    """Summarise the conversation from `first` to before `end` (with the summary so far)."""

    first: int = Field(ge=1)
    end: int = Field(ge=1)
    previous: str | None = None


class Charge(BaseModel):
    """Whom a run's model calls are charged to: its tenant, the credential that started it
    (or its parent, schedule or hook), its agent. The model activity journals each response
    under it and admits each call under their budgets (agentledger.core.budgets)."""

    tenant: str
    charged_to: str | None = Field(None, description="a credential: key:<id>, oidc:..., ...")
    agent: str = FREE_FORM_AGENT


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
    subagents: list[str] = Field(
        default_factory=list, description="sub-agents offered as tools `agent__NAME`"
    )
    provider: str | None = Field(
        None, description="the worker's named provider to call; None: its default client"
    )
    cut: ConversationCut | None = Field(
        None, description="a session's: read the conversation compacted (its summary)"
    )
    summarize: SummaryRequest | None = Field(
        None, description="a session's compaction: summarise these turns instead of replying"
    )
    approval_at: RiskLevel | None = Field(
        None,
        description="the run's approval threshold: only a proposed call that waits for an "
        "approver carries its tool's argument schema; None (inputs scheduled before): "
        "every call carries it",
    )
    approval_always: list[str] = Field(
        default_factory=list, description="tools whose calls always wait for an approver"
    )
    charge: Charge | None = Field(
        None,
        description="whom the call is charged to, under whose budgets it is admitted "
        "(generation 6); None: inputs scheduled before, journaled without a tenant",
    )
    forgotten: list[tuple[int, int]] = Field(
        default_factory=list,
        description="a session's rolled-back turns: conversation positions [start, end) the "
        "model no longer reads (the store keeps them)",
    )
    events_before: int | None = Field(
        None,
        description="the run's last event when the call was scheduled: a watcher shows the "
        "call's text once it has shown that event (the text is faster than the events)",
    )
    fast_path_tenant: str | None = Field(
        None,
        description="the run's tenant, when the call runs on the run's own queue (generation "
        "6): should that tenant have a model-call rate now, the activity refuses the call "
        "(`ModelCallsRated`) and the run sends it through the rate-limited queue",
    )

    def needs_schema(self, tool: str, risk: RiskLevel) -> bool:
        """Whether a proposed call of `tool` carries its argument schema (the workflow
        checks an approver's edit against it, and nothing else reads it)."""
        if self.approval_at is None:
            return True
        return waits_for_approver(tool, risk, self.approval_at, self.approval_always)


class ProposedToolCall(BaseModel):
    """A tool call the model asked for, already checked against the worker's registry."""

    call_id: str
    tool: str
    arguments: JsonDict | None = None
    error: str | None = Field(None, description="why the call cannot run as proposed")
    error_kind: Literal["malformed", "invalid_arguments", "unknown_tool"] | None = None
    risk: RiskLevel = RiskLevel.LOW
    side_effect: bool = False
    local: bool = Field(
        True, description="its tool may run as a local activity where the run allows it"
    )
    parameters: JsonDict | None = Field(
        None, description="the tool's argument schema, to check an approver's edit against"
    )
    summary: str | None = Field(
        None, description="how the call reads to a person, as its tool says (an approval's)"
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
        description="how much of `content` an activity that streamed through the run's "
        "workflow stream had sent; the workflow publishes the rest (None: the activity sent "
        "all of it to watchers itself, over Postgres, or an older one through the run)",
    )
    verdict: VerifyResult | None = Field(
        None, description="the answer's checks, for a final answer of a call that carried them"
    )
    priced: bool = Field(True, description="False: no price is known for the model")
    wrapped_up: bool = Field(
        False,
        description="the tenant's budget was nearly spent: the model was told to finish, and "
        "offered no tool",
    )


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
    charge: Charge | None = Field(None, description="whom a judge's call is charged to")


class FinishInput(BaseModel):
    """Where a run ends: its last mirror batch and its receipt, for one activity to write
    (`mirror.finish`), the rows first since the receipt sums them up."""

    batch: MirrorBatch
    receipt: Receipt


class ReceiptChanges(BaseModel):
    """What `mirror.finish` returns: the fields it changed in the workflow's receipt as it
    stored it (retries from the attempts journal, unaccepted spend, settled effects), so the
    receipt is in history once (the input), not twice (runs from before echo it whole).
    The mirror's projection (agentledger.client.projection) applies them to the input."""

    changes: JsonDict = Field(description="receipt field -> its stored value, JSON")

    @classmethod
    def between(cls, sent: Receipt, stored: Receipt) -> ReceiptChanges:
        before, after = sent.model_dump(mode="json"), stored.model_dump(mode="json")
        return cls(changes={k: v for k, v in after.items() if before.get(k) != v})

    def applied_to(self, sent: Receipt) -> Receipt:
        return Receipt.model_validate({**sent.model_dump(mode="json"), **self.changes})


class DecisionSignature(Strict):
    """An approver's Ed25519 signature over (run id, approval id, action hash, decision,
    edit or reason, time): agentledger.approval_signatures says exactly what is signed."""

    key_id: str
    approval_id: str
    signed_at: datetime
    signature: str = Field(description="base64")


class ApproveInput(BaseModel):
    action_hash: str
    by: str = Field(min_length=1)
    role: str = Field(min_length=1)
    edit: JsonDict | None = Field(
        None,
        description="a JSON Merge Patch of the arguments (RFC 7396: null removes); runs of "
        "generation 5 and before lay it over them, member by member",
    )
    replace: JsonDict | None = Field(
        None, description="the whole arguments to run with instead (never with `edit`)"
    )
    tenant: str | None = None
    signature: DecisionSignature | None = None
    decider: Identity | None = Field(
        None, description="who decides, as the sender's credential proved it"
    )


class RejectInput(BaseModel):
    action_hash: str
    by: str = Field(min_length=1)
    role: str = Field(min_length=1)
    reason: str = Field(min_length=1)
    tenant: str | None = None
    signature: DecisionSignature | None = None
    decider: Identity | None = Field(
        None, description="who decides, as the sender's credential proved it"
    )


class SayInput(BaseModel):
    """A person's message to a run in flight (`agentledger say`); `message_id` makes a second
    delivery of the same message change nothing."""

    message_id: str = Field(min_length=1, max_length=64)
    text: str = Field(min_length=1)
    by: str = Field("cli", min_length=1)
    double_texting: DoubleTexting | None = Field(
        None,
        description="what it does if a session's turn is in flight (the caller's wish, within "
        "its tenant's policy); None: the run's own (spec `double_texting`)",
    )


class ChildApprovalNotice(BaseModel):
    """A sub-agent's run tells its parent it waits for an approval (`approval`), or no
    longer does (None)."""

    run_id: str
    approval: PendingApproval | None = None


class ControlInput(BaseModel):
    by: str = "cli"
    reason: str | None = None
    tenant: str | None = Field(
        None,
        description="the sender's tenant (a backlog refuses a stop or resume that would act on "
        "another's tasks); None: an operator",
    )
    own_tasks: bool = Field(
        False,
        description="a backlog's stop or resume of the sender's tenant's tasks alone (every "
        "client sends it now); False, as histories recorded before it say: of every task",
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
