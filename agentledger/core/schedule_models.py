"""Schedules: what a person asks for, what each fire's workflow takes,
and what `schedule show` answers. A schedule is a Temporal Schedule whose action starts a
`ScheduledFire` workflow per fire time; that workflow starts the run under its tenant's
policy, read then (agentledger.workflows.scheduled_fires).

Ids are the engine's, scoped by tenant, and no direct start can take them: the schedule
`schedule-TENANT~NAME`, each fire `fire-TENANT~NAME-<fire time>` (Temporal appends the time),
and its run `run-~schedule.TENANT~NAME@<fire time>`, so a fire time is one run, ever.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from agentledger.core import constants as names
from agentledger.core._state import RunInput
from agentledger.core.results import TriggerOrigin

Overlap = Literal["skip", "buffer_one", "allow_all", "cancel_other"]
OVERLAPS: tuple[Overlap, ...] = ("skip", "buffer_one", "allow_all", "cancel_other")
# A schedule's (and a hook's) name: what stands in its ids and URLs as it is.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
# The shortest interval between fires.
MIN_EVERY_SECONDS = 1.0


def check_name(name: str, what: str) -> str:
    if not NAME.fullmatch(name):
        raise ValueError(
            f"{what} {name!r} is not a name: letters, digits, '-' and '_', at most 64, "
            "starting with a letter or digit"
        )
    return name


class ScheduleRequest(BaseModel):
    """A schedule as a person asks for it: when (a cron expression, or every so many
    seconds), what (a task for an agent), and what a fire does while the last one's run is
    still busy (`overlap`)."""

    name: str
    task: str = Field(min_length=1, max_length=20_000)
    agent: str | None = Field(None, description="an agent profile; None: the default agent")
    cron: str | None = Field(None, min_length=1, max_length=200, description="e.g. 0 9 * * MON")
    every_seconds: float | None = Field(None, ge=MIN_EVERY_SECONDS, description="every N s")
    overlap: Overlap = Field(
        "skip",
        description="while the last fire's run is busy: skip this fire, buffer one, allow all "
        "at once, or cancel the busy run",
    )
    catchup_seconds: float | None = Field(
        None, gt=0, description="how late a fire missed (the server was down) may still run"
    )
    jitter_seconds: float | None = Field(None, ge=0, description="each fire up to this late")
    paused: bool = False

    @model_validator(mode="after")
    def _one_when(self) -> ScheduleRequest:
        check_name(self.name, "schedule")
        if (self.cron is None) == (self.every_seconds is None):
            raise ValueError("say when it fires: a cron expression or an interval, one of them")
        return self

    @property
    def when(self) -> str:
        return f"cron {self.cron}" if self.cron else f"every {self.every_seconds:g}s"


class FireInput(BaseModel):
    """What each fire of a schedule starts from: its run's spec as the client built it at
    creation (the agent's profile expanded), read again under the tenant's policy at every
    fire."""

    tenant: str
    schedule: str
    spec: RunInput
    charged_to: str | None = Field(None, description="whom its runs are charged to, beside it")


class FireRecord(BaseModel):
    """What became of one fire time: its run, or why none started."""

    tenant: str = Field(description="the schedule's tenant")
    schedule: str = Field(description="the schedule's name")
    fired_at: datetime = Field(description="the fire time")
    run_id: str | None = Field(None, description="its run; None: none started")
    outcome: Literal["started", "skipped", "ended"] = Field(
        description="its run started (and is under way), or ended; or no run: skipped"
    )
    reason: str | None = Field(None, description="why no run started, or how the run ended")


class FireResult(BaseModel):
    run_id: str | None
    outcome: str
    reason: str | None = None


class ScheduleView(BaseModel):
    """A schedule as `schedule show` answers it: its settings, its state in Temporal, and
    its latest fires from the mirror."""

    name: str = Field(description="its name in its tenant")
    tenant: str = Field(description="its tenant: every run it starts is its")
    agent: str = Field(description="the agent each fire runs")
    task: str = Field(description="what each fire's run is asked to do")
    cron: str | None = Field(description="its cron expression, or None")
    every_seconds: float | None = Field(description="or the seconds between fires")
    overlap: Overlap = Field(description="what a fire does while the last one's run is busy")
    catchup_seconds: float | None = Field(description="how late a missed fire may still run")
    jitter_seconds: float | None = Field(description="how late each fire may be")
    paused: bool = Field(description="no fire until resumed")
    note: str | None = Field(None, description="why it was paused, or resumed")
    next_fires: list[datetime] = Field(default_factory=list, description="its next fire times")
    fires: int = Field(0, description="fires Temporal has made")
    skipped_busy: int = Field(0, description="fires skipped while a run was busy (overlap)")
    missed: int = Field(0, description="fires missed past the catch-up window")
    recent: list[FireRecord] = Field(default_factory=list, description="the latest fires")

    def text(self) -> str:
        when = f"cron {self.cron}" if self.cron else f"every {self.every_seconds:g}s"
        lines = [
            f"schedule {self.name} (tenant {self.tenant}): {when}, agent {self.agent}, "
            f"overlap {self.overlap}{', paused' if self.paused else ''}",
            f"task: {self.task}",
            f"fired {self.fires} time(s)"
            + (f"; skipped {self.skipped_busy} while a run was busy" if self.skipped_busy else "")
            + (f"; missed {self.missed} past the catch-up window" if self.missed else ""),
        ]
        if self.next_fires:
            lines.append("next: " + ", ".join(t.isoformat() for t in self.next_fires[:3]))
        for fire in self.recent:
            said = fire.run_id or "no run"
            lines.append(
                f"  {fire.fired_at.isoformat()} {fire.outcome}: {said}"
                + (f" ({fire.reason})" if fire.reason else "")
            )
        return "\n".join(lines)


class ScheduleRow(BaseModel):
    """A schedule of `schedule list`, as the mirror lists it, with its last fire."""

    tenant: str = Field(description="its tenant")
    name: str = Field(description="its name in its tenant")
    agent: str = Field(description="the agent each fire runs")
    task: str = Field(description="what each fire's run is asked to do")
    when: str = Field(description="its cron expression, or every N seconds")
    overlap: Overlap = Field(description="what a fire does while the last one's run is busy")
    paused: bool = Field(description="no fire until resumed")
    created_by: str = Field(description="who made it")
    last_fired_at: datetime | None = Field(None, description="its last fire time")
    last_run_id: str | None = Field(None, description="that fire's run")
    last_outcome: str | None = Field(None, description="that fire's outcome")


def schedule_id(tenant: str, name: str) -> str:
    return f"{names.SCHEDULE_ID_PREFIX}{tenant}~{name}"


def fire_workflow_id(tenant: str, name: str) -> str:
    """The id each fire's workflow takes before Temporal appends the fire time."""
    return f"{names.SCHEDULED_FIRE_ID_PREFIX}{tenant}~{name}"


def fire_run_id(tenant: str, name: str, fired_at: datetime) -> str:
    """The run one fire time starts: one, whatever retries or replays."""
    at = fired_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return f"{names.RUN_ID_PREFIX}~schedule.{tenant}~{name}@{at}"


def trigger_of(schedule: str, fired_at: datetime) -> TriggerOrigin:
    return TriggerOrigin(kind="schedule", name=schedule, fired_at=fired_at)
