"""What the run's open activities are doing, read from Temporal's description of the run
(the model, `ActivityInFlight`, says why)."""

from __future__ import annotations

from datetime import UTC, datetime

from google.protobuf.timestamp_pb2 import Timestamp
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.api.workflow.v1 import PendingActivityInfo

from agentledger.core.run_reports import ActivityInFlight

STATES = {
    PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED: "scheduled",
    PendingActivityState.PENDING_ACTIVITY_STATE_STARTED: "running",
    PendingActivityState.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED: "cancel requested",
    PendingActivityState.PENDING_ACTIVITY_STATE_PAUSED: "paused",
    PendingActivityState.PENDING_ACTIVITY_STATE_PAUSE_REQUESTED: "pause requested",
}


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
