"""What the run's open activities are doing, as Temporal says: `status` shows a model call
on its third attempt, the failure that made it retry and when the next try comes, with no
worker and no mirror needed."""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp
from pydantic import BaseModel, Field
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.api.workflow.v1 import PendingActivityInfo

STATES = {
    PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED: "scheduled",
    PendingActivityState.PENDING_ACTIVITY_STATE_STARTED: "running",
    PendingActivityState.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED: "cancel requested",
    PendingActivityState.PENDING_ACTIVITY_STATE_PAUSED: "paused",
    PendingActivityState.PENDING_ACTIVITY_STATE_PAUSE_REQUESTED: "pause requested",
}


class ActivityInFlight(BaseModel):
    activity: str = Field(description="its type, e.g. model.complete or tool.invoke")
    state: str
    attempt: int
    since: datetime | None = Field(description="this attempt started (or was scheduled) then")
    worker: str | None = Field(description="the worker that last took it")
    last_failure: str | None = Field(description="why the previous attempt failed")
    next_attempt_at: datetime | None = Field(description="when it is tried again, if waiting")


def in_flight(pending: PendingActivityInfo) -> ActivityInFlight:
    def at(stamp: Timestamp) -> datetime | None:
        return stamp.ToDatetime(UTC) if stamp.seconds or stamp.nanos else None

    running = pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
    started = at(pending.last_started_time) if running else None
    return ActivityInFlight(
        activity=pending.activity_type.name,
        state=STATES.get(pending.state, "unknown"),
        attempt=pending.attempt,
        since=started or at(pending.scheduled_time),
        worker=pending.last_worker_identity or None,
        last_failure=(pending.last_failure.message or None)
        if pending.HasField("last_failure")
        else None,
        next_attempt_at=at(pending.next_attempt_schedule_time),
    )
