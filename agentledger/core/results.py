"""What `RunClient` returns about a run: its state, its pending approval, its receipt and
the decisions and controls sent to it. Public; the workflow's queries and updates answer
with these types.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from agentledger.core.constants import DoubleTexting
from agentledger.core.events import EventType
from agentledger.core.identity import Identity
from agentledger.core.spec import JsonDict, Strict
from agentledger.core.states import RunStatus, StepStatus

StepType = Literal["model_call", "tool_call", "approval", "verify", "checkpoint"]


ApprovalKind = Literal["action", "quarantine", "budget", "unknown_outcome"]


class Usage(BaseModel):
    input_tokens: int = Field(0, description="tokens read")
    output_tokens: int = Field(0, description="tokens written")


class CheckOutcome(BaseModel):
    name: str = Field(description="the check")
    passed: bool = Field(description="it passed")
    detail: str = Field("", description="what it found")


class VerifyResult(BaseModel):
    passed: bool = Field(description="every check passed")
    checks: list[CheckOutcome] = Field(description="each check's outcome")
    judge_model: str | None = Field(None, description="the model that judged, if one did")
    usage: Usage = Field(default_factory=Usage, description="the judge's tokens")
    cost_usd: float = Field(0.0, description="what the judge cost, in US dollars")
    journal_attempt: int | None = Field(
        None, description="the attempt that paid for the judge's response (model_journal)"
    )

    @property
    def failures(self) -> list[str]:
        return [f"{c.name}: {c.detail}" for c in self.checks if not c.passed]


class StepSummary(BaseModel):
    step_id: str = Field(description="the step's id: its number and kind (0003-tool_call)")
    seq: int = Field(description="its number in the run, from 1")
    type: StepType = Field(description="model_call, tool_call, approval, verify or checkpoint")
    name: str = Field(description="the model or the tool")
    status: StepStatus = Field(
        description="running, completed, failed, cancelled, interrupted or abandoned"
    )
    attempt: int = Field(1, description="the attempt it is on (or ended on)")


class ApprovalVote(BaseModel):
    """One person's approval of a call that needs several (a two-person rule)."""

    by: str = Field(description="who approved: the name of their identity")
    decider: Identity | None = Field(None, description="who approved, as proved")
    role: str = Field(description="the role they approved in")
    at: datetime = Field(description="when")
    key_id: str | None = Field(None, description="the key whose signature the run verified")
    edit: JsonDict | None = Field(None, description="what it sent to change the arguments")
    edit_kind: Literal["merge_patch", "replace"] | None = Field(
        None, description="how `edit` changed them: a merge patch, or a replacement"
    )


class PendingApproval(BaseModel):
    """What a person is asked to decide. `kind` says what approving means."""

    kind: ApprovalKind = Field(
        "action",
        description="action: approving runs the tool call; other kinds say what approving means",
    )
    reason: str | None = Field(
        None, description="why it needs a person (a policy's rule), if one says"
    )
    approval_id: str = Field(description="the approval's id: a decision names it")
    step_id: str = Field(description="the step that proposed the call")
    tool: str = Field(description="the tool it would call")
    arguments: JsonDict = Field(description="the arguments it would call it with")
    action_hash: str = Field(description="binds a decision to this exact tool call")
    required_role: str = Field(description="the role a decision must be made in")
    approvers: list[str] = Field(
        default_factory=list,
        description="the approvers who may decide it; empty: anyone in the role",
    )
    tenant: str = Field(description="the run's tenant")
    requested_at: datetime = Field(description="when it was asked")
    expires_at: datetime = Field(
        description="when it expires undecided (the run then goes on as its policy says)"
    )
    parameters: JsonDict | None = Field(
        None, description="the tool's argument schema: an edit must leave arguments it accepts"
    )
    risk: str | None = Field(
        None, description="the tool's risk (low, medium, high) for an action; None otherwise"
    )
    approvals_needed: int = Field(1, ge=1, description="distinct approvers it needs")
    votes: list[ApprovalVote] = Field(
        default_factory=list, description="approvals given so far, of those it needs"
    )
    requester: Identity | None = Field(
        None, description="who asked for the run, as their credential proved it"
    )
    summary: str | None = Field(
        None, description="the call in words, as its tool says it reads (Refund $19.99 ...)"
    )


class ChildApproval(BaseModel):
    """An approval one of a run's sub-agent runs waits for: decide it on that run."""

    run_id: str = Field(description="the sub-agent's run: approve or reject it there")
    approval: PendingApproval = Field(description="what the sub-agent's run waits for")


class ApprovalRecord(BaseModel):
    kind: ApprovalKind = Field(
        "action",
        description="action: approving ran the tool call; other kinds say what approving meant",
    )
    approval_id: str = Field(description="the approval's id")
    tool: str = Field(description="the tool the run proposed to call")
    proposed_arguments: JsonDict = Field(description="the arguments it proposed")
    decision: Literal["approved", "rejected", "expired"] = Field(
        description="approved, rejected or expired"
    )
    by: str | None = Field(
        None,
        description="who decided (a key's `key:<id>`, a token's subject, a signed approver's name)",
    )
    role: str | None = Field(None, description="the role it was decided in")
    edit: JsonDict | None = Field(
        None, description="what the decider changed in the arguments, if anything"
    )
    final_arguments: JsonDict | None = Field(None, description="the arguments the tool ran with")
    reason: str | None = Field(None, description="why, for a rejection")
    requested_at: datetime = Field(description="when the run asked")
    decided_at: datetime = Field(description="when it was decided")
    key_id: str | None = Field(None, description="the key whose signature the run verified")
    decider: Identity | None = Field(
        None, description="who decided, as their credential proved it (`by` is its name)"
    )
    votes: list[ApprovalVote] = Field(
        default_factory=list,
        description="the approvals before the last, when the call needed several people",
    )
    edit_kind: Literal["merge_patch", "replace"] | None = Field(
        None,
        description="how `edit` changed the arguments: a JSON Merge Patch (RFC 7396, null "
        "removes), or the whole arguments replaced",
    )
    diff: JsonDict | None = Field(
        None,
        description="the merge patch from `proposed_arguments` to `final_arguments`: what "
        "the edit changed, removals as null",
    )
    summary: str | None = Field(
        None, description="the proposed call in words, as its tool says it reads"
    )
    standing_rule: str | None = Field(
        None,
        description="the standing approval that approved it, by id and in words "
        "(`sa-...: refund_order when cents <= 2000`); null: a person decided",
    )


class RefusedDecision(BaseModel):
    """A decision the run refused when it applied it (a signal, or a signature that failed),
    kept so `status` can say why nothing happened."""

    approval_id: str | None = Field(description="the approval the decision named")
    by: str = Field(description="who sent it")
    reason: str = Field(description="why the run refused it")
    at: datetime = Field(description="when")


class DecisionSeen(BaseModel):
    approval_id: str = Field(description="the approval decided")
    decision: str = Field(description="approved, rejected or expired")
    by: str | None = Field(description="who decided")


class DecisionResult(BaseModel):
    approval_id: str = Field(description="the approval decided")
    decision: str = Field(
        description="approved, rejected: applied; counted: one approval of several; "
        "recorded: held by the run, applied at its next step; abandoned: the run ended first"
    )
    status: RunStatus = Field(description="the run's status after it")
    note: str | None = Field(None, description="what happens next, when not applied yet")
    final_arguments: JsonDict | None = Field(
        None, description="the arguments the approved call runs with, as the run applied them"
    )


class RunMessage(BaseModel):
    """A message said to the run, and when the run took it (None: not yet)."""

    message_id: str = Field(description="the message's id: the same id twice is one message")
    text: str = Field(description="what was said")
    by: str = Field(description="who said it")
    received_at: datetime = Field(description="when the run received it")
    taken_at: datetime | None = Field(None, description="when the run read it; null: not yet")
    taken_before_step: int | None = Field(
        None, description="the number of the model call step that first read it"
    )
    interrupted_step: str | None = Field(
        None, description="the model call it cancelled (on_message: interrupt)"
    )
    double_texting: DoubleTexting | None = Field(
        None, description="what it did to a session's turn in flight (docs/triggers.md)"
    )
    turn_arrived: int | None = Field(
        None, description="the session's turn in flight when it came (None: it was idle)"
    )
    rejected: str | None = Field(None, description="why it was refused (double-texting reject)")


class SessionTurn(BaseModel):
    """One turn of a session (spec `session`): what was asked, what it answered, and what
    that took. Kept small (excerpts) in the run's state; the full text is in the mirror
    (the `conversation` table, and each model call step's output)."""

    turn: int = Field(ge=1, description="its number, from 1")
    message_ids: list[str] = Field(
        default_factory=list, description="the messages it answered (none: the run's task)"
    )
    asked: str | None = Field(None, description="the message's text, cut to 2,000 characters")
    answer: str | None = Field(None, description="its answer, cut to 2,000 characters")
    answer_chars: int = Field(0, description="its answer's length in characters")
    first_step: int = Field(description="its first step's number")
    last_step: int | None = Field(None, description="its last step's number; None: in progress")
    model_calls: int = Field(0, description="the model calls it took")
    tokens: int = Field(0, description="the tokens they used")
    cost_usd: float = Field(0.0, description="what they cost, in US dollars")
    started_at: datetime = Field(description="when it began")
    answered_at: datetime | None = Field(
        None, description="when it was answered; null: in progress"
    )
    first_message: int = Field(
        0, description="where its user message sits in the conversation (for compaction)"
    )
    ended: Literal["answered", "interrupted", "rolled_back"] | None = Field(
        None,
        description="how it ended: answered; interrupted by a message (its work kept); rolled "
        "back for a message (forgotten, its side effects kept); None: in progress",
    )
    kept_effects: list[str] = Field(
        default_factory=list,
        description="a rolled-back turn's side effects, which stand: `tool(arguments)` each",
    )


class LeftInMirror(BaseModel):
    """What a long session no longer carries in its state: its oldest turns, messages and
    steps, counted here. Each is whole in the mirror (`agentledger events`, the `steps` and
    `conversation` tables), so the state a continuation carries stays bounded."""

    turns: int = Field(0, description="turns left out of the state (whole in the mirror)")
    messages: int = Field(0, description="messages left out")
    steps: int = Field(0, description="steps left out")


class SayResult(BaseModel):
    run_id: str = Field(description="the run told")
    message_id: str = Field(description="the message's id (yours, or one made for it)")
    status: RunStatus = Field(description="the run's status")
    delivered: Literal["accepted", "recorded"] = Field(
        description="accepted: a worker holds the run and has it; recorded: the server keeps "
        "it in the run's history until a worker takes the run"
    )
    note: str = Field(description="what happens next, for people")


class ControlResult(BaseModel):
    status: RunStatus = Field(description="the run's status after it")
    paused: bool = Field(description="the run is paused (or pauses at its next step boundary)")
    message: str = Field(description="what happened, for people")


class RunState(BaseModel):
    run_id: str = Field(description="the run's id")
    status: RunStatus = Field(
        description="where it is: queued, running, waiting_for_approval, paused, completed, "
        "failed, cancelled"
    )
    tenant: str = Field(description="the tenant it runs for")
    user: str = Field(description="whom it runs on behalf of, as the requester said")
    requester: Identity | None = Field(
        None, description="who asked for the run, as their credential proved it"
    )
    task: str = Field(description="what it was asked to do")
    current_step_id: str | None = Field(description="the step it is on; null: none")
    steps: list[StepSummary] = Field(description="its steps so far, in order")
    pending_approval: PendingApproval | None = Field(
        description="what it waits for a person to decide; null: nothing"
    )
    pause_requested: bool = Field(
        description="a pause was asked for: it pauses at its next step boundary"
    )
    pause_reason: str | None = Field(None, description="why, as the pause said")
    checkpoint: JsonDict = Field(description="its last accepted checkpoint (JSON)")
    tokens_in: int = Field(description="model input tokens so far")
    tokens_out: int = Field(description="model output tokens so far")
    cost_usd: float = Field(description="what its model calls cost so far, in US dollars")
    result: str | None = Field(description="its answer, once it has one")
    error: str | None = Field(description="why it failed, if it did")
    priority: int | None = Field(None, description="1 (soonest) to 5 (latest)")
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
    step_id: str = Field(description="the tool call's step")
    tool: str = Field(description="the tool")
    idempotency_key: str = Field(description="what binds its retries to one effect")
    arguments: JsonDict = Field(description="the arguments it ran with")
    ok: bool = Field(description="it succeeded")
    duplicate_prevented: bool = Field(description="a retry found it done and did not repeat it")
    reconciliation: str | None = Field(
        None, description="how an unknown outcome was settled, if one was"
    )
    output: Any = Field(None, description="what the tool returned")


class RetryRecord(BaseModel):
    step_id: str = Field(description="the step retried")
    attempts: int = Field(description="attempts it took")
    reason: str = Field(description="why the first failed")


class ForkOrigin(Strict):
    """Where a fork starts: steps before `from_step` are taken as `parent_run_id` recorded
    them; step `from_step` uses `edit_output` if given, else runs live; the rest runs live."""

    parent_run_id: str = Field(min_length=1, description="the run it was forked from")
    from_step: int = Field(ge=1, description="the step it ran again from")
    edit_output: Any = Field(
        None, description="the output it took for that step instead of the recorded one, if any"
    )
    effect_scope: str | None = Field(
        None,
        description="whose effects the fork's are: the parent's scope, so that a call the "
        "parent made finds its ledger row (None: forks from before it, scoped by their id)",
    )


class TriggerOrigin(BaseModel):
    """What started a run that nobody started by hand: a schedule's fire or a webhook's
    delivery."""

    kind: Literal["schedule", "hook"] = Field(description="a schedule's fire, or a hook's delivery")
    name: str = Field(description="the schedule's or the hook's name, in its tenant")
    fired_at: datetime | None = Field(None, description="a schedule's: the fire time")
    delivery_id: str | None = Field(None, description="a hook's: the delivery's id")


class SandboxExecution(BaseModel):
    """A `run_code` step and the image digest it ran on, so a receipt says what code ran."""

    step_id: str = Field(description="the run_code step")
    attempt: int = Field(description="its attempt")
    image: str | None = Field(description="the container image it ran in")
    image_digest: str | None = Field(description="that image's digest: what code ran")
    status: str | None = Field(description="how it ended")
    exit_code: int | None = Field(description="the code's exit code")


class Receipt(BaseModel):
    run_id: str = Field(description="the run's id")
    agent: str = Field("default", description="the agent profile it ran (default: none)")
    profile_hash: str | None = Field(
        None, description="that profile's hash: which version of it ran"
    )
    task: str = Field(description="what it was asked to do")
    tenant: str = Field(description="the tenant it ran for")
    user: str = Field(
        description="whom it ran on behalf of, as the requester said: not an identity"
    )
    requester: Identity | None = Field(
        None, description="who asked for the run, as their credential proved it"
    )
    outcome: RunStatus = Field(description="how it ended: completed, failed or cancelled")
    answer: str | None = Field(description="its answer")
    error: str | None = Field(description="why it failed, if it did")
    steps: list[StepSummary] = Field(description="its steps, in order")
    side_effects: list[SideEffectRecord] = Field(
        description="every tool call that acted on the world, once each"
    )
    approvals: list[ApprovalRecord] = Field(
        description="every approval it asked for, and who decided what"
    )
    retries: list[RetryRecord] = Field(description="steps that took more than one attempt, and why")
    duplicates_prevented: int = Field(description="side effects it did not repeat on a retry")
    tokens_in: int = Field(description="model input tokens")
    tokens_out: int = Field(description="model output tokens")
    cost_usd: float = Field(description="what its model calls cost, in US dollars")
    unaccepted_tokens: int = Field(0, description="paid for on attempts the run did not use")
    unaccepted_cost_usd: float = Field(
        0.0, description="of which paid for attempts the run did not use"
    )
    unpriced_models: list[str] = Field(
        default_factory=list, description="models with no known price: cost_usd leaves them out"
    )
    verification: VerifyResult | None = Field(
        description="its answer's checks, if its spec asked for any"
    )
    unresolved: list[str] = Field(
        description="what it could not settle (an effect of unknown outcome), to look at"
    )
    started_at: datetime = Field(description="when it started")
    finished_at: datetime = Field(description="when it ended")
    forked_from: ForkOrigin | None = Field(
        None, description="the run and step it was forked from, if it was"
    )
    forks: list[str] = Field(
        default_factory=list, description="runs forked from this one (filled when read)"
    )
    parent_run_id: str | None = Field(None, description="the run it is a sub-agent of")
    children: list[str] = Field(default_factory=list, description="its sub-agents' runs")
    trigger: TriggerOrigin | None = Field(
        None, description="the schedule or webhook that started it (None: a person or program)"
    )
    charged_to: str | None = Field(
        None, description="the credential its spend counts against (beside its tenant)"
    )
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

    kind: Literal["event", "text", "text_reset", "receipt"] = Field(
        description="event (a run event), text (a piece of model text), text_reset (a retried "
        "model call's text replaces what its step showed so far: the retry's follows) or "
        "receipt (the end)"
    )
    type: EventType = Field(
        description="the event's type; `model.text`; `model.text_reset`; or `receipt`"
    )
    offset: int | None = Field(None, description="position in the live stream; None: the mirror")
    seq: int | None = Field(None, description="the event's sequence number in the run")
    step_id: str | None = Field(None, description="the step it belongs to, if any")
    data: JsonDict = Field(
        default_factory=dict, description="the event's data (a receipt's: the receipt)"
    )
    text: str | None = Field(None, description="a piece of model text, for kind text")
    at: datetime | None = Field(None, description="when it happened")
