"""The step primitive: one step of a run, from its start to its record.

`Recorder.step` (agentledger.workflows.recording) opens a step; this module is the one place
a step record is built (a test holds it to that), so every record of a step says the
same id, seq, kind, input and start, whichever outcome ends it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Literal, Protocol, TypeVar

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from agentledger.core import payload_limits
    from agentledger.core.results import StepSummary
    from agentledger.core.spec import JsonDict
    from agentledger.core.states import StepStatus
    from agentledger.core.wire import MirrorBatch, StepRecord

T = TypeVar("T")


class StepRecorder(Protocol):
    """What a step needs of the run's record: the mirror batch its activity carries, and
    where its records go."""

    pending_steps: list[StepRecord]

    def take_batch(self) -> MirrorBatch: ...

    def put_back(self, batch: MirrorBatch) -> None: ...

    async def flush(self, *, trim: Literal["records", "all"] | None = None) -> None: ...

    def complete_step(self, record: StepRecord) -> None: ...


class Step:
    """A step in flight, from its start to its record (`Recorder.step`).

    `start` schedules its activity with the run's pending mirror batch in the input, `outcome`
    reads that activity's result, and `end` writes the step's record the moment its outcome is
    known (events keep the order in which things happened). The one place a step record is
    built."""

    def __init__(
        self,
        recording: StepRecorder,
        summary: StepSummary,
        *,
        input: JsonDict | None = None,
        started: datetime | None = None,
    ) -> None:
        self.recording = recording
        self.id, self.seq, self.kind, self.name = (
            summary.step_id,
            summary.seq,
            summary.type,
            summary.name,
        )
        self.input = input or {}
        self.started = started
        self.carried: MirrorBatch | None = None
        self.ended = False

    def record(self, status: StepStatus, **fields: Any) -> StepRecord:
        """The step's record: its identity, input and start, `status`, and `fields` (an
        outcome's output, usage, attempt, key; a name the outcome changed)."""
        return StepRecord(
            **{
                "step_id": self.id,
                "seq": self.seq,
                "type": self.kind,
                "name": self.name,
                "status": status,
                "input": self.input,
                "started_at": self.started,
                "finished_at": workflow.now(),
                **fields,
            }
        )

    def end(self, status: StepStatus, **fields: Any) -> None:
        """The step is over: its record goes to the mirror with the next write."""
        self.recording.complete_step(self.record(status, **fields))
        self.ended = True

    def report(self, status: StepStatus) -> None:
        """A record of the step not yet over (an approval waiting): the mirror shows it until
        the step's own record replaces it."""
        self.recording.pending_steps.append(self.record(status, finished_at=None, final=False))

    async def start(
        self, schedule: Callable[[MirrorBatch | None], workflow.ActivityHandle[T]]
    ) -> workflow.ActivityHandle[T]:
        """Schedule the step's activity, `schedule(batch)`, with the run's pending mirror
        batch riding in its input. A batch that makes the input too large is written on its
        own first (trimmed if it must be, as the run's final write is)."""
        batch = self.recording.take_batch()
        try:
            handle = schedule(batch)
        except ApplicationError as err:
            self.recording.put_back(batch)
            if not payload_limits.is_too_large(err):
                raise
            await self.recording.flush()
            return schedule(None)
        self.carried = batch
        return handle

    async def outcome(self, result: Awaitable[T]) -> T:
        """The step activity's result. One that did not complete may have ended before it
        applied the batch it carried, so that batch's rows go again with the next write."""
        try:
            return await result
        except BaseException:
            if self.carried is not None:
                self.recording.put_back(self.carried)
            raise
