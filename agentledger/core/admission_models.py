"""Tenants' limits and the admission queue's messages: what crosses the admission
workflow's boundary, one model per message (see agentledger.core.fairness for the priorities)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field, field_validator

from agentledger.core._state import RunInput
from agentledger.core.constants import ADMISSION_ID_PREFIX, DoubleTexting

QueueState = Literal["waiting", "admitted", "released"]


class TenantLimits(BaseModel):
    """One tenant's share and limits; a tenant with no row has the defaults (no limits)."""

    tenant: str = Field(min_length=1, max_length=200)
    weight: float = Field(1.0, gt=0, description="its share of the workers against others")
    max_in_flight: int | None = Field(None, gt=0, description="runs past `queued` at once")
    max_queued: int | None = Field(
        None, ge=0, description="runs waiting for a slot; a start past it is refused"
    )
    model_calls_per_second: float | None = Field(None, gt=0, description="model calls / s")
    allowed_priorities: list[Annotated[int, Field(ge=1, le=5)]] | None = Field(
        None, min_length=1, description="the priorities its runs may take; None: any"
    )
    schedule_role: Literal["runner", "admin"] | None = Field(
        None, description="the least role that may make its schedules; None: admin"
    )
    double_texting: list[DoubleTexting] | None = Field(
        None,
        min_length=1,
        description="the double-texting policies a caller may ask for a message to one of its "
        "sessions (else the session's own applies); None: any",
    )

    @field_validator("allowed_priorities")
    @classmethod
    def _sorted(cls, value: list[int] | None) -> list[int] | None:
        return None if value is None else sorted(set(value))

    def priority_refusal(self, priority: int) -> str | None:
        """Why a run of this tenant may not start at `priority`; None if it may."""
        allowed = self.allowed_priorities
        if allowed is None or priority in allowed:
            return None
        listed = ", ".join(map(str, allowed))
        return (
            f"refused: tenant {self.tenant!r} may start runs at priority {listed} only, not "
            f"{priority}; start it at one of those (`--priority`), or an operator allows more "
            f"(`agentledger tenants set {self.tenant} --priorities 1,2,3,4,5`)"
        )

    def double_texting_refusal(self, asked: DoubleTexting) -> str | None:
        """Why a caller of this tenant may not ask for `asked`; None if it may."""
        allowed = self.double_texting
        if allowed is None or asked in allowed:
            return None
        return (
            f"refused: tenant {self.tenant!r} lets a message ask for double-texting "
            f"{', '.join(allowed)} only, not {asked}; leave it out (the session's own policy "
            f"applies), or an operator allows it (`agentledger tenants set {self.tenant} "
            f"--double-texting ...`)"
        )

    @property
    def capped(self) -> bool:
        """Runs of this tenant go through its admission queue."""
        return self.max_in_flight is not None or self.max_queued is not None


class QueuedStartInput(BaseModel):
    """Start this run through the tenant's queue (update `admission.enqueue`)."""

    run_id: str
    spec: RunInput
    task_queue: str
    indexed: bool = True
    limits: TenantLimits
    request_id: str | None = Field(None, description="the same for every try of one start")


class HoldInput(BaseModel):
    """Hold a run its parent started waiting (`spec.admission` names this queue) until a
    slot is free (update `admission.hold`): a backlog's task, a workflow's own agent."""

    run_id: str
    tenant: str


class HoldRequest(BaseModel):
    """What the hold activity needs: the run, and the queue to create if it is not there."""

    run_id: str
    tenant: str
    task_queue: str


def admission_id(tenant: str) -> str:
    """The workflow id of a tenant's admission queue."""
    return ADMISSION_ID_PREFIX + tenant


class QueuedStart(BaseModel):
    run_id: str
    existing: bool = Field(description="the run was already known: not started again")
    position: int | None = Field(None, description="1-based place among waiting runs")


class ReleaseInput(BaseModel):
    """A run ended (signal `admission.release`): its slot, or its place, is free."""

    run_id: str


class MoveInput(BaseModel):
    """A start was turned away while the queue moves to the current build (signal
    `admission.move`): a refused update leaves no event and wakes no wait, so the starter
    signals before it tries again, and the queue continues as new onto the current build."""


class AdmitInput(BaseModel):
    """The run may leave `queued` (signal to the run)."""

    admission_id: str


class PositionInput(BaseModel):
    run_id: str


class QueuePosition(BaseModel):
    run_id: str
    state: QueueState | None = Field(None, description="None: the queue does not know it")
    position: int | None = None
    waiting: int = 0
    in_flight: int = 0
    max_in_flight: int | None = None


class QueueRow(BaseModel):
    """One run's place in its tenant's queue, as the mirror holds it."""

    tenant: str
    run_id: str
    seq: int
    state: QueueState
    at: datetime


class QueueSyncInput(BaseModel):
    rows: list[QueueRow]


class AdmissionCarry(BaseModel):
    """What a continued admission workflow picks up: the queue and the slots in use."""

    seq: int = 0
    waiting: list[str] = Field(default_factory=list)
    seqs: dict[str, int] = Field(default_factory=dict)
    in_flight: list[str] = Field(default_factory=list)
    requests: dict[str, str] = Field(
        default_factory=dict, description="run id -> the start request that queued it"
    )


class AdmissionInput(BaseModel):
    tenant: str
    limits: TenantLimits
    carry: AdmissionCarry | None = None
    # Continue as new well before Temporal's limits; each start costs about ten events.
    history_events_limit: int = Field(8_000, ge=100)
    # While runs wait behind a full cap, ask Temporal this often whether an admitted run has
    # closed without saying so (terminated, timed out): its slot is freed then.
    sweep_seconds: float = Field(60, gt=0)
    # Set by every start today: the queue keeps the limits it was started with (read from
    # Postgres by the start gate) and those `tenants set` configures, so a start cannot bring its
    # own. Queues recorded before it take each start's limits, as they did, and still replay.
    keeps_limits: bool = False


class RunIdsInput(BaseModel):
    """Runs the queue holds slots for, to ask Temporal about."""

    run_ids: list[str]
