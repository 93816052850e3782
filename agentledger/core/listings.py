"""What the mirror lists for a client: runs, a backlog's tasks and dead letters, tenants.
One model a listing, its fields in the order `--json` has always printed them, so the CLI
dumps the model where it dumped the row."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from agentledger.core.identity import Identity
from agentledger.core.policy_rules import TenantPolicy
from agentledger.core.results import PendingApproval
from agentledger.core.spec import JsonDict


class RunRow(BaseModel):
    """One run of `list`: the mirror's row, or, for a run no worker has taken yet, what
    Temporal holds of it in the same shape."""

    run_id: str
    status: str
    tenant: str | None
    priority: int | None
    user_id: str | None
    task: str | None
    current_step_id: str | None
    tokens_in: int | None
    tokens_out: int | None
    cost_usd: float | None
    duplicates_prevented: int | None
    created_at: datetime | None
    finished_at: datetime | None


class BacklogTaskRow(BaseModel):
    """One task of `backlog list`, with its run's live status, step and checkpoint."""

    ordinal: int
    task_key: str
    title: str
    state: str
    attempts: int
    max_attempts: int
    last_error: str | None
    run_id: str | None
    run_status: str | None
    current_step_id: str | None
    checkpoint: Any  # the run's accepted checkpoint (JSON)
    step_checkpoint: Any  # the live step's mid-step progress (JSON), if any
    enqueued_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime | None


class BacklogListing(BaseModel):
    """A backlog as the mirror last saw it, with its tasks in order."""

    agent: str
    status: str
    stop_reason: str | None
    policy: JsonDict
    generation: int
    updated_at: datetime
    tasks: list[BacklogTaskRow]


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

    tenant: str
    weight: float
    max_in_flight: int | None
    max_queued: int | None
    model_calls_per_second: float | None
    allowed_priorities: list[int] | None
    in_flight: int
    queued: int


class TenantView(BaseModel):
    """One tenant as `tenants show` shows it: its settings and runs (None: nothing set and
    nothing queued), and the policy its runs start under."""

    tenant: str
    settings: TenantRow | None
    policy: TenantPolicy


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


class InboxItem(BaseModel):
    """An approval a run waits for (the HTTP inbox): the run, who asked for it (and on
    behalf of whom, as they said), its task, and the approval as the run asked for it."""

    run_id: str
    user: str | None = Field(description="on behalf of whom, as the requester said")
    task: str | None
    tenant: str | None
    approval: PendingApproval
    requester: Identity | None = Field(
        None, description="who asked for the run, as their credential proved it"
    )


class MirroredStep(BaseModel):
    """One step as the mirror holds it: its input, and its output or error once it has one."""

    step_id: str
    type: str
    name: str | None
    status: str
    input: Any = None
    output: Any = None
    error: str | None = None
