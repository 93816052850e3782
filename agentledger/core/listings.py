"""What the mirror lists for a client: runs, a backlog's tasks and dead letters, tenants.
One model a listing, its fields in the order `--json` has always printed them, so the CLI
dumps the model where it dumped the row."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from agentledger.core.budgets import BudgetStatus
from agentledger.core.constants import FREE_FORM_AGENT
from agentledger.core.identity import Identity
from agentledger.core.policy_rules import TenantPolicy
from agentledger.core.results import PendingApproval
from agentledger.core.spec import JsonDict

# Runs the engine starts for its own work, under its `run-~` ids: an eval's replayed cases
# (children of its `eval-` workflow) and sub-agents. `list` shows them only when asked.
ENGINE_RUN_PREFIXES = ("run-~child.eval-", "run-~sub.")


def engines_own(run_id: str) -> bool:
    return run_id.startswith(ENGINE_RUN_PREFIXES)


class RunRow(BaseModel):
    """One run of `list`: the mirror's row, or, for a run no worker has taken yet, what
    Temporal holds of it in the same shape."""

    run_id: str = Field(description="the run's id")
    status: str = Field(
        description="where it is: queued, running, waiting_for_approval, completed, failed, "
        "cancelled, ..."
    )
    tenant: str | None = Field(description="the tenant it runs for")
    agent: str = Field(
        description=f"the agent profile it runs; {FREE_FORM_AGENT}: none, a spec of its own"
    )
    priority: int | None = Field(description="1 (soonest) to 5 (latest)")
    user_id: str | None = Field(description="whom it runs on behalf of, as the start named them")
    task: str | None = Field(description="what it was asked to do")
    current_step_id: str | None = Field(description="the step it is on; null: none")
    tokens_in: int | None = Field(description="model input tokens so far")
    tokens_out: int | None = Field(description="model output tokens so far")
    cost_usd: float | None = Field(description="what its model calls cost so far, in US dollars")
    duplicates_prevented: int | None = Field(
        description="side effects it did not repeat on a retry"
    )
    created_at: datetime | None = Field(description="when it started")
    finished_at: datetime | None = Field(description="when it ended; null: it has not")


class BacklogTaskRow(BaseModel):
    """One task of `backlog list`, with its run's live status, step and checkpoint."""

    ordinal: int = Field(description="its place in the backlog, from 1")
    task_key: str = Field(description="its idempotency key in the backlog")
    title: str = Field(description="its title")
    state: str = Field(description="todo, running, paused, done, or failed (its attempts used up)")
    attempts: int = Field(description="runs started for it so far")
    max_attempts: int = Field(description="runs it may take before it has failed")
    last_error: str | None = Field(description="why its last run failed; null: none did")
    run_id: str | None = Field(description="its current or last run")
    run_status: str | None = Field(description="that run's status, live")
    current_step_id: str | None = Field(description="the step that run is on")
    checkpoint: Any = Field(description="the run's accepted checkpoint (JSON)")
    step_checkpoint: Any = Field(description="the live step's progress within it (JSON), if any")
    enqueued_at: datetime | None = Field(description="when it was added")
    started_at: datetime | None = Field(description="when its first run started")
    finished_at: datetime | None = Field(description="when it was done, or failed")
    updated_at: datetime | None = Field(description="when the mirror last saw it change")


class BacklogListing(BaseModel):
    """A backlog as the mirror last saw it, with its tasks in order."""

    agent: str = Field(description="the agent profile whose backlog it is")
    status: str = Field(description="active, or stopped (its tasks wait until resumed)")
    stop_reason: str | None = Field(description="why it was stopped; null: it was not")
    policy: JsonDict = Field(
        description="how it runs tasks (attempts, concurrency) as the operator set it"
    )
    generation: int = Field(description="how many times it continued as new")
    updated_at: datetime = Field(description="when the mirror last saw it change")
    tasks: list[BacklogTaskRow] = Field(description="its tasks in order (a tenant's own alone)")


class DeadTask(BaseModel):
    """A task that used up its attempts (`backlog dead`)."""

    ordinal: int
    task_key: str
    title: str
    attempts: int
    max_attempts: int
    last_error: str | None
    run_id: str | None
    finished_at: datetime | None


class TenantRow(BaseModel):
    """A tenant of `tenants list`: its settings, runs in flight and runs waiting."""

    tenant: str = Field(description="the tenant's name")
    weight: float = Field(description="its share of the workers against other tenants' (fairness)")
    max_in_flight: int | None = Field(description="runs it may have running at once; null: no cap")
    max_queued: int | None = Field(description="runs it may have waiting for a slot; null: no cap")
    model_calls_per_second: float | None = Field(
        description="its model calls' rate limit; null: none"
    )
    allowed_priorities: list[int] | None = Field(
        description="the priorities its runs may take; null: any"
    )
    double_texting: list[str] | None = Field(
        None, description="the double-texting policies a message may ask for; null: any"
    )
    in_flight: int = Field(description="its runs running now")
    queued: int = Field(description="its runs waiting for a slot now")


class CostRow(BaseModel):
    """A line of `agentledger costs`: model calls paid for, summed by what it names (each of
    tenant, agent, model, key and day it was summed by; None for the others)."""

    tenant: str | None = Field(None, description="the tenant, when summed by tenant")
    agent: str | None = Field(None, description="the agent, when summed by agent")
    model: str | None = Field(None, description="the model, when summed by model")
    key: str | None = Field(
        None, description="the credential charged (key:ID, oidc:..., hook:..., schedule:...)"
    )
    day: str | None = Field(None, description="the UTC day (YYYY-MM-DD), when summed by day")
    calls: int = Field(description="model calls paid for")
    tokens_in: int = Field(description="prompt tokens")
    tokens_out: int = Field(description="reply tokens")
    cost_usd: float = Field(description="what they cost, in USD (unpriced models: 0)")


class TenantShown(BaseModel):
    """One tenant as `tenants show` shows it: its settings and runs (None: nothing set and
    nothing queued), and the policy its runs start under."""

    tenant: str = Field(description="the tenant's name")
    settings: TenantRow | None = Field(
        description="its settings and runs; null: nothing set and nothing queued"
    )
    policy: TenantPolicy = Field(description="the policy its runs start under")
    budgets: list[BudgetStatus] = Field(
        default_factory=list, description="its budgets, and what each spent this period"
    )


class ApiKeyRow(BaseModel):
    """An API key of the HTTP door (`keys list`): whose it is and in which role; never the
    key, of which Postgres keeps only a hash."""

    key_id: str
    name: str | None = None  # the label `keys create --name` gave it, for people
    tenant: str
    role: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    approval_roles: list[str] = Field(
        default_factory=list,
        description="roles an approval may ask for that this key decides in, beside its role "
        "(`keys create --decides finance`)",
    )


class NewApiKey(ApiKeyRow):
    """A key just made (`keys create`): `key` is shown this once."""

    key: str


class EvidenceStep(BaseModel):
    """A step a run took before it asked for an approval: a model's turn (its stated
    reason in `output.content`) or a tool call (its arguments and what it returned)."""

    step_id: str = Field(description="the step's id")
    type: str = Field(description="model_call, tool_call, ...")
    name: str | None = Field(description="the tool, or the model")
    status: str = Field(description="how it ended")
    input: Any = Field(None, description="a tool call's arguments")
    output: Any = Field(
        None, description="what it returned (a model's turn: its text and the tools it called)"
    )
    error: str | None = Field(None, description="why it failed, if it did")


class InboxItem(BaseModel):
    """An approval a run waits for (the HTTP inbox): the run, who asked for it (and on
    behalf of whom, as they said), its task, and the approval as the run asked for it."""

    run_id: str = Field(description="the run that waits")
    user: str | None = Field(description="on behalf of whom, as the requester said")
    task: str | None = Field(description="what the run was asked to do")
    tenant: str | None = Field(description="the run's tenant")
    approval: PendingApproval = Field(
        description="what it waits for: the tool, its arguments, risk, role, expiry and action hash"
    )
    requester: Identity | None = Field(
        None, description="who asked for the run, as their credential proved it"
    )
    evidence: list[EvidenceStep] = Field(
        default_factory=list,
        description="the steps before the request, oldest first (the last few): the tools "
        "it called and what they returned, and the model's stated reason",
    )


class TimelineStep(EvidenceStep):
    """One step of a run as its timeline shows it (the inspector): what it took and gave
    (an approval's output is its decision: who, what, why), and what it cost."""

    seq: int = Field(description="its number in the run, from 1")
    attempt: int = Field(description="the attempt it ended on (or is on)")
    tokens_in: int = Field(description="model input tokens (a model turn's)")
    tokens_out: int = Field(description="model output tokens (a model turn's)")
    cost_usd: float = Field(description="what it cost, in US dollars (a model turn's)")
    started_at: datetime | None = Field(description="when it started")
    finished_at: datetime | None = Field(description="when it ended; null: it has not")


class MirroredStep(BaseModel):
    """One step as the mirror holds it: its input, and its output or error once it has one."""

    step_id: str
    type: str
    name: str | None
    status: str
    input: Any = None
    output: Any = None
    error: str | None = None
