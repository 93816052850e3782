"""Every input and result of the backlog workflow, its updates and its activities.

A backlog is an agent's ordered task list. Each task runs as one AgentRun child per attempt;
the child's workflow id is derived from the agent, the task's idempotency key and the attempt
number, so Temporal's workflow-id uniqueness is what keeps one attempt from starting twice.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field, field_serializer, field_validator

from agentledger.core._state import RunInput
from agentledger.core.constants import BACKLOG_ID_PREFIX, RUN_ID_PREFIX
from agentledger.core.keys import id_part
from agentledger.core.spec import JsonDict, RunSpec, Strict

AGENT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"
MAX_TASKS_PER_ENQUEUE = 1000
TaskState = Literal["todo", "running", "paused", "done", "failed"]


def backlog_id(agent: str) -> str:
    return BACKLOG_ID_PREFIX + agent


def safe_key(key: str) -> str:
    """The key as it may appear in a workflow id: no dots, distinct keys stay distinct."""
    return id_part(key, dots=False)


def compact_spec(spec: RunSpec | None) -> JsonDict | None:
    """A spec without its default values: what history and continue-as-new carry."""
    return None if spec is None else spec.model_dump(mode="json", exclude_defaults=True)


def child_run_id(agent: str, key: str, launch: int) -> str:
    """`run-<agent>.<key>.<n>`: agents and safe keys hold no dot, so the id reads back."""
    return f"{RUN_ID_PREFIX}{agent}.{safe_key(key)}.{launch}"


# ---------------------------------------------------------------- policy and tasks (user input)


class BacklogPolicy(Strict):
    max_attempts: int = Field(3, ge=1, le=100, description="runs per task before dead-letter")
    parallelism: int = Field(1, ge=1, le=32, description="tasks of this agent run side by side")
    on_poison: Literal["continue", "stop"] = Field(
        "continue", description="after a task fails for good: go on, or stop the backlog"
    )
    retry_delay_seconds: float = Field(10, ge=0, le=86_400, description="wait between attempts")
    continue_as_new_after: int = Field(
        200, ge=1, le=100_000, description="finished tasks per workflow run (history size)"
    )


class PolicyPatch(Strict):
    """Only the policy fields a person named; the rest keep their current values."""

    max_attempts: int | None = Field(None, ge=1, le=100)
    parallelism: int | None = Field(None, ge=1, le=32)
    on_poison: Literal["continue", "stop"] | None = None
    retry_delay_seconds: float | None = Field(None, ge=0, le=86_400)
    continue_as_new_after: int | None = Field(None, ge=1, le=100_000)

    def apply(self, policy: BacklogPolicy) -> BacklogPolicy:
        return policy.model_copy(update=self.model_dump(exclude_none=True))

    def is_empty(self) -> bool:
        return not self.model_dump(exclude_none=True)

    def then(self, later: PolicyPatch) -> PolicyPatch:
        """This patch with `later`'s fields over it."""
        return self.model_copy(update=later.model_dump(exclude_none=True))

    def shared_fields(self) -> list[str]:
        """The fields it sets that bound the whole backlog, not one tenant's tasks."""
        return [f for f in SHARED_POLICY_FIELDS if getattr(self, f) is not None]


# How many tasks run at once and how often the backlog continues as new are the whole
# backlog's; the other fields a tenant may set for its own tasks (`tenant_policies`).
SHARED_POLICY_FIELDS = ("parallelism", "continue_as_new_after")


class TaskItem(Strict):
    """One task as a backlog file names it."""

    title: str = Field(min_length=1, max_length=200, description="a title for people")
    idempotency_key: str = Field(
        min_length=1,
        max_length=200,
        description="names the task in the backlog: a key already there is not added again",
    )
    spec: RunSpec = Field(
        description="the run to make of it (its task, agent's fields; the tenant is the caller's)"
    )
    max_attempts: int | None = Field(None, ge=1, le=100, description="overrides the policy")

    @field_validator("spec")
    @classmethod
    def _key_belongs_to_the_task(cls, spec: RunSpec) -> RunSpec:
        if spec.idempotency_key is not None:
            raise ValueError(
                "spec.idempotency_key is set by the backlog; put the key on the task instead"
            )
        return spec

    @field_serializer("spec")
    def _compact(self, spec: RunSpec) -> JsonDict | None:
        return compact_spec(spec)


class QueuedTask(TaskItem):
    """A task as the start gate hands it to the backlog: its spec is the run's input, with what
    the engine set (its tenant's weight)."""

    spec: RunInput


class BacklogTask(BaseModel):
    """A task as the backlog workflow holds it (and carries it across continue-as-new)."""

    key: str
    title: str
    ordinal: int
    state: TaskState = "todo"
    attempts: int = Field(0, description="failed runs since it was (re)queued")
    max_attempts: int
    launches: int = Field(0, description="runs ever started for it; names the next child")
    run_id: str | None = None
    last_error: str | None = None
    spec: RunInput | None = Field(None, description="dropped once done: history stays small")
    enqueued_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None

    @field_serializer("spec")
    def _compact(self, spec: RunSpec | None) -> JsonDict | None:
        return compact_spec(spec)

    def row(self, *, with_spec: bool) -> TaskRow:
        return TaskRow(
            **self.model_dump(exclude={"spec"}),
            spec=self.spec.model_dump(mode="json") if with_spec and self.spec else None,
        )


class TaskView(BaseModel):
    """A task as the backlog's state query shows it."""

    key: str
    title: str
    ordinal: int
    state: TaskState
    attempts: int
    max_attempts: int
    launches: int
    run_id: str | None
    last_error: str | None


class TaskRow(TaskView):
    """A task as the mirror stores it; `spec` travels only in the first write."""

    spec: JsonDict | None = None
    enqueued_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


# ---------------------------------------------------------------- the workflow and its messages


class BacklogInput(BaseModel):
    """What starts (or continues as new) an agent's backlog workflow."""

    agent: str = Field(pattern=AGENT_PATTERN)
    policy: BacklogPolicy = Field(default_factory=BacklogPolicy)
    tasks: list[BacklogTask] = Field(default_factory=list, description="every task not done")
    done_keys: list[str] = Field(
        default_factory=list, description="done in earlier runs: kept only to ignore re-enqueues"
    )
    next_ordinal: int = 1
    version: int = Field(0, description="of the last mirror write; grows across runs")
    stopped: bool = False
    stop_reason: str | None = None
    generation: int = Field(0, description="how many times the backlog continued as new")
    carried: bool = Field(False, description="state came from the previous run, not the mirror")
    tenant_policies: dict[str, PolicyPatch] = Field(
        default_factory=dict, description="each tenant's own policy, over `policy`"
    )
    halted: dict[str, str] = Field(
        default_factory=dict, description="tenants whose tasks are stopped, and why"
    )


class EnqueueInput(BaseModel):
    tasks: list[QueuedTask] = Field(min_length=1, max_length=MAX_TASKS_PER_ENQUEUE)
    policy: PolicyPatch = Field(default_factory=PolicyPatch)
    by: str = "cli"
    request_id: str | None = Field(
        None, max_length=64, description="sent as a signal: names its outcome (`delivery`)"
    )
    tenant: str | None = Field(
        None, description="the sender's tenant: its policy is its own tasks'; None: an operator"
    )


class EnqueueResult(BaseModel):
    added: list[str] = Field(description="keys added now")
    ignored: list[str] = Field(description="keys already in the backlog: not added again")
    total: int = Field(description="tasks in the backlog now")
    stopped: bool = Field(description="the backlog is stopped: the tasks wait until it is resumed")
    held: list[str] = Field(
        default_factory=list,
        description="keys the server holds in the backlog's history, not applied yet: a "
        "worker adds them (ignoring keys already there) when it takes the backlog",
    )
    held_note: str | None = Field(
        None, description="what becomes of the held keys, and what to do; None: none held"
    )


class BacklogControlResult(BaseModel):
    stopped: bool
    tasks: list[str] = Field(description="keys of the tasks the command paused or resumed")
    message: str


class RetryInput(BaseModel):
    key: str
    by: str = "cli"
    tenant: str | None = Field(None, description="the sender's tenant: another's task is refused")
    request_id: str | None = Field(None, max_length=64, description="as EnqueueInput's")


class RetryResult(BaseModel):
    key: str
    ordinal: int | None = Field(description="None while the server holds the retry")
    state: TaskState | None
    message: str


class BacklogControlSignal(BaseModel):
    """A stop or resume sent as a signal (the updates take a ControlInput)."""

    by: str = "cli"
    reason: str | None = None
    tenant: str | None = Field(None, description="as ControlInput's")
    own_tasks: bool = Field(False, description="as ControlInput's")
    request_id: str | None = Field(None, max_length=64, description="as EnqueueInput's")


def not_all_yours(agent: str, tenant: str) -> str:
    """Why a stop or resume under a tenant is refused while the backlog holds another's tasks
    (said by the command, agentledger.client.backlogs, and by the backlog itself)."""
    return (
        f"the backlog of agent {agent} holds other tenants' tasks too, and this command acts "
        f"on all of them; this client acts for tenant {tenant!r} only. An operator (no "
        "AGENTLEDGER_TENANT) may"
    )


def no_task(agent: str, key: str) -> str:
    """A retry of a key the backlog does not hold, or (under a tenant) of another's task."""
    return (
        f"no task {key!r} in the backlog of agent {agent}; `backlog list --agent {agent}` "
        "shows the keys"
    )


class Delivery(BaseModel):
    """What the backlog made of a write sent as a signal, kept for its sender to read."""

    request_id: str
    applied: bool = Field(description="False: refused by the same checks as the update's")
    message: str
    enqueued: EnqueueResult | None = None
    control: BacklogControlResult | None = None
    retried: RetryResult | None = None


class BacklogState(BaseModel):
    agent: str
    stopped: bool
    stop_reason: str | None
    policy: BacklogPolicy
    generation: int
    done_earlier: int = Field(description="tasks done before the last continue-as-new")
    tasks: list[TaskView] = Field(description="tasks not done, and those done since")

    def task(self, key: str) -> TaskView:
        return next(t for t in self.tasks if t.key == key)


# ---------------------------------------------------------------- activities


class BacklogSyncInput(BaseModel):
    agent: str
    version: int
    stopped: bool
    stop_reason: str | None
    policy: BacklogPolicy
    generation: int
    updated_at: datetime
    tasks: list[TaskRow] = Field(default_factory=list)


class BacklogLoadInput(BaseModel):
    agent: str


class BacklogLoadResult(BaseModel):
    """What the mirror remembers of a backlog whose workflow is gone (terminated, reset)."""

    found: bool
    version: int = 0
    policy: BacklogPolicy | None = None
    stopped: bool = False
    stop_reason: str | None = None
    generation: int = 0
    next_ordinal: int = 1
    tasks: list[BacklogTask] = Field(default_factory=list, description="every task not done")
    done_keys: list[str] = Field(default_factory=list)
