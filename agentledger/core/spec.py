"""A run spec and its parts: what a person writes to describe a run. Public.

`RunSpec` holds only fields a person sets; it refuses any other (`Strict`). What the engine
adds when it starts a run (a continue-as-new carry, the admission queue, a fork's origin,
the workflow generation, the tenant's weight) is on the private `RunInput`
(agentledger.core._state), which the start gate builds from a spec.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agentledger.core.constants import FREE_FORM_AGENT, DoubleTexting
from agentledger.core.periods import span_seconds
from agentledger.core.policy_rules import ApprovalRule

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


class ModelSettings(Strict):
    model: str | None = Field(None, description="Model name; None means the worker's default.")
    provider: str | None = Field(
        None, description="a provider the worker names (AGENTLEDGER_PROVIDERS); None: its default"
    )
    temperature: float = Field(0.0, ge=0, le=2)
    max_tokens: int | None = Field(None, gt=0)


class Signer(Strict):
    """An approver identity: a name, the role and tenant it may decide for, its public key."""

    name: str = Field(min_length=1)
    role: str = Field(min_length=1)
    tenant: str | None = Field(None, description="None: any tenant's runs")
    public_key: str = Field(description="Ed25519 public key, base64 of its 32 raw bytes")
    key_id: str = Field(description="the key's fingerprint (agentledger.approval_signatures)")


def waits_for_approver(tool: str, risk: RiskLevel, at: RiskLevel, always: list[str]) -> bool:
    """Whether a call of `tool` at `risk` waits for a human, under a threshold and a list of
    tools that always do (`ApprovalPolicy`; a model call is given both to tell too)."""
    return tool in always or RISK_ORDER[risk] >= RISK_ORDER[at]


class ApprovalPolicy(Strict):
    # Tool calls at or above this risk wait for a human; "always" names tools that always do.
    require_at_or_above: RiskLevel = RiskLevel.HIGH
    always: list[str] = Field(default_factory=list)
    default_role: str = "approver"
    roles: dict[str, str] = Field(default_factory=dict, description="tool name -> required role")
    approvers: list[str] = Field(default_factory=list, description="if set, only these may decide")
    timeout_seconds: float = Field(24 * 3600, gt=0)
    on_reject: Literal["cancel", "replan"] = "cancel"
    # Keyed approvers (`agentledger approvers add`, copied in when the run starts): with any,
    # only decisions signed by one of them apply. None and no require_signatures is the
    # single-user escape hatch: unsigned decisions, as anyone who reaches Temporal sends them.
    signers: list[Signer] = Field(default_factory=list)
    require_signatures: bool = False
    signature_max_age_seconds: float = Field(3600, gt=0, description="older signatures expire")
    # The tenant's rules come first (agentledger.core.tenant_policy puts them there), then
    # the agent's, then the spec's own: the first that names a role decides it.
    rules: list[ApprovalRule] = Field(
        default_factory=list,
        description="calls that need approval (by a role, by several people) or never run, "
        "by tool and a condition on their arguments",
    )
    requester_may_approve: bool = Field(
        True, description="False: whoever asked for the run may not approve its calls"
    )
    approvals_needed: int = Field(
        1, ge=1, le=5, description="distinct approvers every approval needs (2: two-person)"
    )

    def signatures_required(self) -> bool:
        return self.require_signatures or bool(self.signers)

    def needs_approval(self, tool: str, risk: RiskLevel, arguments: JsonDict | None = None) -> bool:
        """Whether a call waits for people: at the risk threshold, a tool that always does, or
        a rule that holds of its arguments."""
        if waits_for_approver(tool, risk, self.require_at_or_above, self.always):
            return True
        return any(not r.deny and r.applies(tool, arguments or {}) for r in self.rules)

    def denies(self, tool: str, arguments: JsonDict) -> ApprovalRule | None:
        """The rule that forbids this call, if one does."""
        return next((r for r in self.rules if r.deny and r.applies(tool, arguments)), None)

    def role_for(self, tool: str, arguments: JsonDict | None = None) -> str:
        """The role a call's approvers must have: the first rule that holds of its
        `arguments` and names one (rules judge calls alone: None, for a budget or another
        kind of approval, reads no rule), else the tool's role, else the default."""
        if arguments is not None:
            for rule in self.rules:
                if rule.role and not rule.deny and rule.applies(tool, arguments):
                    return rule.role
        return self.roles.get(tool, self.default_role)

    def approvers_for(self, tool: str, arguments: JsonDict) -> int:
        """How many distinct people must approve this call."""
        ruled = [r.approvers for r in self.rules if not r.deny and r.applies(tool, arguments)]
        return max([self.approvals_needed, *ruled])

    def ruled_tools(self) -> set[str]:
        """Tools some rule may stop for approval (`*`: any tool)."""
        return {r.tool for r in self.rules if not r.deny}


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


class SubagentLimits(Strict):
    """How far a run may delegate: a bound on the tree of runs one start can grow."""

    max_depth: int = Field(2, ge=1, le=5, description="levels of sub-agents below the run")
    max_calls: int = Field(8, ge=1, le=100, description="sub-agent runs one run may start")


class SessionSpec(Strict):
    """A run that stays open after its answer, for the next message."""

    idle_timeout: float = Field(
        gt=0,
        le=90 * 86400,
        description="seconds (or a span: 90s, 30m, 24h, 7d) the session waits for the next "
        "message after an answer, holding no worker; then it completes with its receipt",
    )
    compact_after_turns: int = Field(
        20,
        ge=2,
        le=1000,
        description="after this many turns since the last compaction, older turns are "
        "summarised by a model call and the session continues as new (sooner when Temporal "
        "suggests its history is long); the full text stays in the mirror",
    )
    keep_turns: int = Field(
        1, ge=1, le=50, description="the latest turns the model still reads word for word"
    )

    @field_validator("idle_timeout", mode="before")
    @classmethod
    def _a_span(cls, value: Any) -> Any:
        # A session's idle timeout written as a span: 90s, 30m, 24h, 7d.
        return span_seconds(value) if isinstance(value, str) else value


DOUBLE_TEXTING_HELP = (
    "what a message said to a session while its turn is in flight does: reject (refused, "
    "409), enqueue (it starts the next turn), interrupt (the turn ends at its next step "
    "boundary, its work kept, and the message starts the next), rollback (the turn is "
    "cancelled and forgotten, side effects it made kept and named); None: the turn in "
    "flight reads it at its next model call"
)


# What only the engine sets, on the private `RunInput` (agentledger.core._state). A spec
# written before they moved there holds each as null, and still loads; a value is refused.
ENGINE_ONLY = (
    "carry",
    "admission",
    "fork",
    "workflow_generation",
    "fairness_weight",
    "parent_run_id",
    "subagent_depth",
    "charged_to",
    "trigger",
    "requester",
    "tenant_policy",
    "model_calls_rated",
)


class RunSpec(Strict):
    """Everything a person sets for a run, validated before anything starts."""

    task: str = Field(min_length=1, max_length=MAX_TASK_CHARS)
    agent: str = Field(
        FREE_FORM_AGENT,
        min_length=1,
        max_length=200,
        description=f"the agent profile that works on it; {FREE_FORM_AGENT}: none, a spec of "
        "its caller's own",
    )
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
    subagents: dict[str, JsonDict] = Field(
        default_factory=dict,
        description="agents the model may delegate to, as tools `agent__NAME` taking a task: "
        "each name's spec fields (its profile's), filled in from the agent's `subagents`",
    )
    subagent_limits: SubagentLimits = Field(default_factory=lambda: SubagentLimits())
    local_read_only_tools: bool | None = Field(
        None,
        description="a tool with no side effect and low risk runs as a local activity, in the "
        "workflow's own task (after any approval it needs): no task queue round trip, a "
        "marker in history; False: every tool call is an activity of its own; None: the engine's "
        "default, which it records in the run's input when the run starts (local). An "
        "agent's profile may turn it off; a spec may then not turn it back on",
    )
    on_message: Literal["queue", "interrupt"] = Field(
        "queue",
        description="a message said to the run while it works (`agentledger say`): queue, the "
        "model reads it at its next call; interrupt, the model call in flight is cancelled "
        "and the run replans with it (docs/steering.md)",
    )
    session: SessionSpec | None = Field(
        None,
        description="keep the run open after each answer for the next message (`agentledger "
        "chat`, `say`), until it is idle this long; None: the run ends with its answer",
    )
    double_texting: DoubleTexting | None = Field(None, description=DOUBLE_TEXTING_HELP)

    @model_validator(mode="before")
    @classmethod
    def _engine_fields_left_unset(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        return {
            k: v
            for k, v in data.items()
            if not (k in ENGINE_ONLY and v is None and k not in cls.model_fields)
        }
