"""What `RunClient` answers about runs beyond their state: a start, a run's report (who
serves it, what Temporal holds open) and a mirror check. Pure models, so
`agentledger.types` can hand them out without loading the operations that fill them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from agentledger.core.results import RunState, SayResult
from agentledger.core.spec import JsonDict


@dataclass
class Started:
    run_id: str
    existing: bool
    queue_position: int | None = None  # waiting for a slot of its tenant's cap
    # A keyed start whose key names a session already under way, with another task: that
    # task, said to the session as a message (its double-texting policy applies).
    said: SayResult | None = None


class ActivityInFlight(BaseModel):
    """One of the run's open activities, as Temporal says: `status` shows a model call on
    its third attempt, the failure that made it retry and when the next try comes, with no
    worker and no mirror needed."""

    activity: str = Field(description="its type, e.g. model.complete or tool.invoke")
    state: str = Field(description="scheduled, started or waiting to retry")
    attempt: int = Field(description="the attempt it is on")
    since: datetime | None = Field(description="this attempt started (or was scheduled) then")
    worker: str | None = Field(description="the worker that last took it")
    last_failure: str | None = Field(description="why the previous attempt failed")
    next_attempt_at: datetime | None = Field(description="when it is tried again, if waiting")


class WorkerSeen(BaseModel):
    identity: str = Field(description="the worker's identity (host and process)")
    last_poll: datetime | None = Field(
        description="when it last asked the run's task queue for work"
    )
    seconds_ago: float | None = Field(description="how long ago that was")


class RunReport(BaseModel):
    """What `status` shows: the state, where it came from, and who serves the run."""

    source: Literal["workflow", "mirror", "temporal"] = Field(
        description="where the state came from: the run itself (workflow), the mirror while no "
        "worker answers, or what Temporal holds of a run no worker has taken (temporal)"
    )
    state: RunState
    task_queue: str = Field(description="the task queue whose workers serve it")
    waiting_since: datetime | None = Field(
        None, description="queued since then: no worker has taken the run yet"
    )
    workers: list[WorkerSeen] = Field(description="who polled the run's task queue lately")
    last_progress_at: datetime | None = Field(description="a worker last moved the run then")
    no_progress_seconds: float | None = Field(description="how long since a worker last moved it")
    in_flight: list[ActivityInFlight] = Field(
        default_factory=list, description="the run's activities Temporal holds open, as it says"
    )
    workflow_task_failure: str | None = Field(
        None,
        description="why a worker fails the run's workflow task again and again (a key "
        "mismatch, say), and the fix; None: it does not",
    )

    def flat_json(self) -> JsonDict:
        """The state's fields with the report's beside them, as `status --json` prints."""
        return {
            **self.state.model_dump(mode="json"),
            **self.model_dump(mode="json", exclude={"state"}),
        }


class MirrorCheck(BaseModel):
    """How a run's mirror rows compare with those its Temporal history derives."""

    run_id: str
    open: bool = Field(description="the run is still running (its mirror still moves)")
    agrees: bool
    counts: dict[str, int] = Field(description="differences of each kind")
    differences: list[str]
