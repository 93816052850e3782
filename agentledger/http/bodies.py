"""What the REST routes take and give, as pydantic models: a body is refused by its model
(400, naming each field it refuses), and the API's description (`/openapi.json`, `/docs`)
is made from the same models, so it documents every field and cannot drift from them.

No body field names a tenant: the credential does. A field a route does not take is
refused by name. Answers the client layer already types (a run's state, a receipt, a
backlog) are its models as they are; the door's own shapes are here.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, create_model

from agentledger.core.backlog_models import TaskItem
from agentledger.core.bounds import JSON_BYTES, NAME_CHARS, REASON_CHARS, TASK_CHARS
from agentledger.core.constants import DoubleTexting
from agentledger.core.identity import Identity
from agentledger.core.listings import TenantRow
from agentledger.core.policy_rules import ApprovalRule, FreeForm, TenantPolicy
from agentledger.core.results import RunState, SayResult
from agentledger.core.run_reports import RunReport
from agentledger.core.spec import JsonDict, Signer
from agentledger.core.webhook_models import DeliveryFormat

MAX_LIST = 500


def _not_blank(text: str) -> str:
    if not text.strip():
        raise ValueError("must be non-empty text")
    return text


NotBlank = AfterValidator(_not_blank)
Name = Annotated[str, Field(min_length=1, max_length=NAME_CHARS), NotBlank]
TaskText = Annotated[str, Field(min_length=1, max_length=TASK_CHARS), NotBlank]
Reason = Annotated[str, Field(min_length=1, max_length=REASON_CHARS), NotBlank]
Hash = Annotated[str, Field(min_length=1, max_length=64), NotBlank]


class Body(BaseModel):
    """A request body: a JSON object of exactly these fields."""

    model_config = ConfigDict(extra="forbid")


class StartRun(Body):
    """Start a run of your tenant; the `Idempotency-Key` header names it, so a retried
    start is the same run."""

    task: TaskText = Field(description="what the agent is asked to do")
    agent: Name | None = Field(
        None,
        description="the agent profile to run (its model, instructions, tools and "
        "approvals; AGENTLEDGER_AGENTS); without it, the default run",
    )
    user: Name | None = Field(
        None, description="whom the run is on behalf of, as your application names them"
    )
    priority: int | None = Field(
        None,
        ge=1,
        le=5,
        strict=True,
        description="1 runs soonest, 5 latest (default 3); only those your tenant may take",
    )
    double_texting: DoubleTexting | None = Field(
        None,
        description="when the Idempotency-Key names a session under way and this task is "
        "another: the task is said to it as a message, and this is what it does while a "
        "turn is in flight (as for /say)",
    )


class Approve(Body):
    """Approve the action the run waits for, as your credential's identity."""

    edit: JsonDict | None = Field(
        None,
        description="a JSON Merge Patch of the arguments before the action runs (RFC 7396: "
        "a field set to null is removed; the receipt keeps before, after and the change); "
        f"at most {JSON_BYTES:,} bytes as JSON",
    )
    arguments: JsonDict | None = Field(
        None,
        description="the whole arguments to run with instead (not with `edit`); at most "
        f"{JSON_BYTES:,} bytes as JSON",
    )
    role: Name | None = Field(
        None,
        description="the role you decide in: only the one the approval asks for, which your "
        "credential must hold (by default that one)",
    )
    action_hash: Hash | None = Field(
        None,
        description="the pending action's hash as you saw it: the decision holds only if "
        "the run still waits for exactly that action",
    )


class Reject(Body):
    """Reject the action the run waits for, as your credential's identity."""

    reason: Reason = Field(description="why; the run and its receipt keep it")
    role: Name | None = Field(
        None,
        description="the role you decide in: only the one the approval asks for, which your "
        "credential must hold (by default that one)",
    )
    action_hash: Hash | None = Field(
        None, description="the pending action's hash as you saw it (see approve)"
    )


class NoFields(Body):
    """No body, or an empty JSON object."""


class Say(Body):
    """Tell the run something: a session takes it as its next turn."""

    text: TaskText = Field(description="the message")
    message_id: Name | None = Field(
        None, description="your id for the message: the same id twice is one message"
    )
    double_texting: DoubleTexting | None = Field(
        None,
        description="what it does while a session's turn is in flight: reject (409), enqueue "
        "(the next turn), interrupt (the turn ends at its next step, its work kept), "
        "rollback (the turn is forgotten, its side effects kept); within your tenant's "
        "policy; none: the session's own",
    )


class Fork(Body):
    """A new run from a step of this one: the steps before it as recorded."""

    from_step: int = Field(ge=1, strict=True, description="the step (its number) to run again")
    edit_output: Any = Field(
        None, description="for a tool step: the output to take instead of the recorded one"
    )
    key: Name | None = Field(
        None, description="names the fork: the same key twice is the same fork"
    )


class Enqueue(Body):
    """Add tasks at the end of the agent's backlog, in order (the backlog is made if new)."""

    tasks: list[TaskItem] = Field(
        min_length=1,
        max_length=1000,
        description="each task's title, idempotency key (a key already queued is not "
        "added again) and run spec",
    )


class RunsQuery(Body):
    """Which runs to list."""

    status: Name | None = Field(
        None, description="only runs in this status (queued, waiting_for_approval, completed, ...)"
    )
    agent: Name | None = Field(None, description="only runs of this agent profile")
    since_hours: float | None = Field(
        None, gt=0, description="only runs started in the last so many hours; none: any time"
    )
    limit: int = Field(50, ge=1, le=MAX_LIST, description="at most this many, newest first")


class StepsQuery(Body):
    """How many of a run's steps to list."""

    limit: int = Field(
        MAX_LIST, ge=1, le=MAX_LIST, description="at most this many, the first ones, in order"
    )


class ApprovalsQuery(Body):
    """How many pending approvals to list."""

    limit: int = Field(100, ge=1, le=MAX_LIST, description="at most this many, newest first")


class RunStarted(BaseModel):
    """The run a start (or a fork) named."""

    run_id: str = Field(description="the run's id: the tenant and the idempotency key in it")
    existing: bool = Field(
        description="true: the same key named a run already, and this is that run (200); "
        "false: it started now (201)"
    )
    said: SayResult | None = Field(
        None,
        description="the key named a session under way and the task was another: it was said "
        "to the session as a message",
    )


class Cancelled(BaseModel):
    """What a cancel did."""

    run_id: str = Field(description="the run")
    outcome: str = Field(description="what happened: cancelled, or why nothing was to do")


class SignedIn(BaseModel):
    """Who the credential proves you are, and the tenant it acts for."""

    identity: Identity = Field(description="who you are: a key's name, a token's email or subject")
    tenant: str | None = Field(description="your credential's tenant")
    roles: list[str] = Field(description="what you may do, and the approval roles you decide in")
    expires_at: datetime | None = Field(description="when the credential stops opening the door")


class GrantStanding(Body):
    """A standing approval: approve the tool's calls that `when` holds of, for `hours`."""

    tool: Name = Field(description="the tool whose calls it approves")
    when: Reason | None = Field(
        None, description='a condition on the arguments, such as "cents <= 2000"; none: all'
    )
    hours: float = Field(gt=0, description="how long it lasts (at most the tenant's policy says)")
    run_id: Name | None = Field(None, description="only this run's calls (a session's)")
    agent: Name | None = Field(None, description="only this agent's runs")


class Subscribe(Body):
    """A notification webhook for your tenant's runs."""

    name: Name = Field(description="its name: the same name again replaces its settings")
    url: Annotated[str, Field(min_length=8, max_length=2000)] = Field(
        description="where deliveries are POSTed (http:// or https://)"
    )
    secret: Annotated[str, Field(min_length=16, max_length=200)] | None = Field(
        None, description="signs each delivery; none: a random one, answered this once"
    )
    format: DeliveryFormat = Field(
        "json",
        description="json: agentledger's body; slack: a message a Slack incoming webhook "
        "takes (text and blocks, a button to the inbox item when the workers know the "
        "door's public address)",
    )


class Removed(BaseModel):
    """What was removed."""

    name: str = Field(description="the webhook's name: it is told nothing more")


class StandingQuery(Body):
    """Which standing approvals to list."""

    all: bool = Field(False, description="revoked and expired ones too")


class TenantView(BaseModel):
    """Your tenant as its admin sees it."""

    tenant: str = Field(description="your credential's tenant")
    settings: TenantRow | None = Field(
        description="its limits and weight as the operator set them; null: the defaults"
    )
    approvers: list[Signer] = Field(description="its registered approvers' public keys")
    policy: TenantPolicy = Field(
        description="the policy its runs start under: agents, free-form specs, approval rules"
    )


class PolicyChange(Body):
    """Change the policy your tenant's runs start under: the fields you send, the others kept
    (agentledger.core.tenant_policy)."""

    agents: list[Name] | None = Field(
        None, description="the agent profiles your callers may run; null: every one loaded"
    )
    default_agent: Name | None = Field(
        None, description="what a start naming no agent runs; null: the only profile loaded"
    )
    free_form: FreeForm | None = Field(
        None,
        description="the least role that may start a run from a spec of its own: runner, "
        "admin; null: operators only",
    )
    rules: list[ApprovalRule] | None = Field(
        None, description="approval rules every run carries first (they replace the current)"
    )
    requester_may_approve: bool | None = Field(
        None, description="whether whoever asked for a run may approve its calls"
    )
    two_person: bool | None = Field(
        None, description="every approval needs two distinct approvers in its role"
    )
    standing_tools: list[Name] | None = Field(
        None, description="the tools your approvers may grant standing approvals for (* any)"
    )
    standing_max_hours: float | None = Field(
        None, gt=0, description="the longest a standing approval may last"
    )
    always_ask: list[Name] | None = Field(
        None, description="tools whose every call asks a person: no standing approval covers"
    )


# GET /v1/runs/{run_id} answers a run's state and the report's fields beside it, as
# `agentledger status --json` prints them (RunReport.flat_json).
RunView: type[BaseModel] = create_model(  # type: ignore[call-overload]
    "RunView",
    __base__=RunState,
    __doc__="The run's state, as `agentledger status --json` prints it.",
    **{
        name: (field.annotation, field)
        for name, field in RunReport.model_fields.items()
        if name != "state"
    },
)


class ErrorDetail(BaseModel):
    """What went wrong, and what to do."""

    kind: str = Field(
        description="invalid_input, unauthenticated, forbidden, not_found, refused, "
        "timeout, too_large, rate_limited, too_many_streams, too_many_failures, "
        "too_many_connections or unreachable"
    )
    message: str = Field(description="for people: what was refused and what to do next")


class ErrorBody(BaseModel):
    """Every refusal's body."""

    error: ErrorDetail = Field(description="the refusal")
