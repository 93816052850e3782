"""Recording a run: its steps and events, the mirror of it in Postgres, and its receipt.

The run's `Recorder`, a component every other one is built with (in `RunContext`). Every
change of status goes through `set_status`, which enforces the state machine in
`agentledger.core.states`; every step is opened by `step` (agentledger.workflows.steps), with a
deterministic id. What changed since the last write goes to the mirror as one idempotent
batch: in the input of the next step's own activity, or, where the run blocks or ends,
written by an activity of its own that the run does not wait for; it waits for them all
before its receipt and before it continues as new.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal, TypeVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

from agentledger.workflows import run_metrics, run_state
from agentledger.workflows.steps import Step

with workflow.unsafe.imports_passed_through():
    from agentledger.activities.mirror import MirrorActivities
    from agentledger.core import fairness, payload_limits, run_summaries, search_attributes
    from agentledger.core._state import RunInput, RunProgress
    from agentledger.core.errors import PAYLOAD_TOO_LARGE
    from agentledger.core.events import EventType
    from agentledger.core.results import PendingApproval, StepSummary, StepType
    from agentledger.core.spec import JsonDict
    from agentledger.core.states import STEP_STATUS, RunStatus, StepStatus, check_transition
    from agentledger.core.wire import (
        Charge,
        FinishInput,
        MirrorBatch,
        RunEvent,
        RunSnapshot,
        StepRecord,
    )

# Mirror writes are activities on a task queue of their own: Temporal dispatches them only
# after it has committed the task that scheduled them (a local activity wrote what a lost task
# never did), and on their own queue they never wait behind model or tool calls, and tenants
# take turns there. The run does not wait for them: it goes on, and waits for them all before
# its receipt and before it continues as new. Fences keep writes that land out of order from
# going backwards.
# Mirror and receipt writes must outlast a Postgres outage: retry for as long as it takes,
# and often enough that the mirror catches up within seconds of the database returning
# (fairness.MIRROR_RETRY). A mirror write goes ahead of model and tool calls waiting on the
# same task queue (fairness.MIRROR_PRIORITY: 1, the highest of Temporal's priority keys; a
# run's own is 3 unless it was started with another), so under load the mirror keeps up.
MIRROR_PRIORITY = fairness.MIRROR_PRIORITY
MIRROR_RETRY = fairness.MIRROR_RETRY
# A mirror write is one short transaction; a worker that died during one is noticed soon.
MIRROR_WRITE_TIMEOUT = timedelta(seconds=10)
# A step schedules one activity, not two: a `mirror.sync` before every step would double the
# activities, and the Temporal server's work, per step (the bench measured both). What the
# run accepted before a model or tool call rides in that call's input, and its activity
# applies it in the same transaction as its claim on the step, fenced as `mirror.sync` is.
# Temporal dispatches the activity only after it has committed the task that scheduled it,
# so the mirror still never runs ahead of history. A write of its own is left for where the
# run blocks or ends (approval, pause, admission queue, continue-as-new, receipt) and for a
# batch too large to ride along.

T = TypeVar("T")
Trim = Literal["records", "all"] | None
# How a write Temporal would refuse as too large is cut down, a step at a time.
TRIMS: list[Trim] = [None, "records", "all"]


def trimmed(batch: MirrorBatch, trim: Trim) -> MirrorBatch:
    """`batch` with its long strings cut: the records' ("records"; the run row and its
    checkpoint stay whole), or all of them ("all")."""
    if trim == "records":
        return batch.model_copy(
            update={
                "steps": [payload_limits.trimmed(s) for s in batch.steps],
                "events": [payload_limits.trimmed(e) for e in batch.events],
            }
        )
    if trim == "all":
        return payload_limits.trimmed(batch)
    return batch


def approval_input(pending: PendingApproval) -> JsonDict:
    """An approval step's input, the same in each of its records: the mirror keeps the one
    that lands first, and concurrent writes may land in any order."""
    return {
        "kind": pending.kind,
        "arguments": pending.arguments,
        "required_role": pending.required_role,
    }


@dataclass(frozen=True)
class RunContext:
    """What each component of a run is built with: the run's input, its declared state
    (`RunProgress`, the one place it lives) and its record."""

    spec: RunInput
    run_id: str
    progress: RunProgress
    recorder: Recorder
    # Whom its model calls are charged to, under whose budgets each is admitted; None for a
    # run of generation 5 or before (agentledger.workflows.changes).
    charge: Charge | None = None
    # Whether a session's messages follow its double-texting policy (generation 6), or are
    # all taken into the turn in flight.
    double_texting: bool = False

    def parts(self) -> tuple[RunInput, str, RunProgress, Recorder]:
        """The context as a component keeps it: spec, run id, progress, recorder."""
        return self.spec, self.run_id, self.progress, self.recorder


class Recorder:
    """The run's record: its status, steps and events, the mirror writes not yet landed, and
    its receipt. The run's state is `progress`; what is here besides is what a continuation
    does without (flushed before it continues: run_state.WORKFLOW_ONLY)."""

    def __init__(
        self,
        spec: RunInput,
        run_id: str,
        progress: RunProgress,
        publish: Callable[[RunEvent], None],
        indexed_status: str | None,
    ) -> None:
        self.spec, self.run_id, self.progress = spec, run_id, progress
        # Where each event goes live as it happens (the run's stream, which `watch` follows).
        self.publish = publish
        # Only runs started with the search attributes keep them current (_index_status).
        self.indexed_status = indexed_status
        self.pending_steps: list[StepRecord] = []
        self.pending_events: list[RunEvent] = []
        self.mirror_writes: list[workflow.ActivityHandle[None]] = []

    def set_status(self, new: RunStatus, step_id: str | None = None) -> None:
        if new != self.progress.status:
            old = self.progress.status
            self.progress.status = check_transition(old, new)
            self.event(EventType.STATUS_CHANGED, step_id, {"from": old.value, "to": new.value})
            self._index_status(new)
        if step_id is not None:
            self.progress.current_step_id = step_id
        self.show_details()

    def _index_status(self, new: RunStatus) -> None:
        """Keep `AgentrunStatus` current, for runs started with it (see
        agentledger.core.search_attributes): an upsert only when the shown status changes."""
        if self.indexed_status is None:
            return
        shown = search_attributes.shown_status(new)
        if shown != self.indexed_status:
            workflow.upsert_search_attributes([search_attributes.STATUS.value_set(shown)])
            self.indexed_status = shown

    def show_details(self) -> None:
        """The Web UI's *Current details*: what the run does or waits for, in words."""
        workflow.set_current_details(run_summaries.current_details(self.run_id, self.progress))

    def finish(
        self, status: RunStatus, *, answer: str | None = None, error: str | None = None
    ) -> None:
        self.set_status(status)
        self.progress.answer, self.progress.error = answer, error
        self.progress.finished_at = workflow.now()
        self.progress.current_step_id = None
        self._close_steps_in_flight(status)
        pending = self.progress.pending_approval
        if pending is not None:
            self.progress.unresolved.append(
                f"approval {pending.approval_id} for {pending.tool} undecided"
            )
            self._step_in_flight(
                pending.step_id, input=approval_input(pending), started=pending.requested_at
            ).end(StepStatus.ABANDONED, finished_at=self.progress.finished_at)
            self.progress.pending_approval = None
        self.event(EventType.RUN_FINISHED, data={"status": status.value, "error": error})
        self.show_details()

    def _close_steps_in_flight(self, status: RunStatus) -> None:
        """A step the run ended during (a cancel, a failed check) ends with it, on record:
        otherwise its attempt's own report would stand in the mirror as if accepted."""
        pending = self.progress.pending_approval
        for step in list(self.progress.steps):
            if step.status != StepStatus.RUNNING or (pending and step.step_id == pending.step_id):
                continue
            Step(self, step).end(
                StepStatus.CANCELLED if status == RunStatus.CANCELLED else StepStatus.ABANDONED,
                error=f"the run ended ({status.value}) during this step",
                finished_at=self.progress.finished_at,
            )

    def fail_unsent_step(self, error: str) -> None:
        """The step whose input was refused never started: record it as failed."""
        last = self.progress.steps[-1] if self.progress.steps else None
        if last is None or last.status != StepStatus.RUNNING:
            return
        Step(self, last).end(StepStatus.FAILED, error=f"{PAYLOAD_TOO_LARGE}: {error}")

    @contextlib.asynccontextmanager
    async def step(
        self,
        kind: StepType,
        name: str,
        *,
        input: JsonDict | None = None,
        moves_status: bool = True,
    ) -> AsyncIterator[Step]:
        """One step of the run: allocated with its deterministic id, the run put in the
        status its kind takes (`STEP_STATUS`; `moves_status=False` for a step the run takes
        without moving: a session's summary while it waits, a fork's edited output), and its
        record written when its body ends it (`Step.end`), or, if the body leaves it without
        one, as completed. A body that raises leaves the step running: the run ends with it,
        and its end closes it (`_close_steps_in_flight`)."""
        self.progress.seq += 1
        summary = StepSummary(
            step_id=f"{self.progress.seq:04d}-{kind}",
            seq=self.progress.seq,
            type=kind,
            name=name,
            status=StepStatus.RUNNING,
        )
        self.progress.steps.append(summary)
        if moves_status and kind in STEP_STATUS:
            self.set_status(STEP_STATUS[kind], summary.step_id)
        step = Step(self, summary, input=input or {}, started=workflow.now())
        yield step
        if not step.ended:
            step.end(StepStatus.COMPLETED)

    def adopt(self, record: StepRecord) -> None:
        """A step another run took, as it recorded it (a fork's seed)."""
        self.progress.steps.append(
            StepSummary(
                step_id=record.step_id,
                seq=record.seq,
                type=record.type,
                name=record.name,
                status=record.status,
                attempt=record.attempt,
            )
        )
        self.pending_steps.append(record)

    def has_unsent(self) -> bool:
        """Whether rows wait for the next mirror write."""
        return bool(self.pending_events or self.pending_steps)

    def _step_in_flight(self, step_id: str, **record: Any) -> Step:
        """A step begun in an earlier activation (an approval the run ended during)."""
        summary = next(s for s in self.progress.steps if s.step_id == step_id)
        return Step(self, summary, **record)

    def complete_step(self, record: StepRecord) -> None:
        for i, summary in enumerate(self.progress.steps):
            if summary.step_id == record.step_id:
                self.progress.steps[i] = summary.model_copy(
                    update={"name": record.name, "status": record.status, "attempt": record.attempt}
                )
        self.pending_steps.append(record)
        run_metrics.on_step(self.spec, record)
        self.event(EventType.step_ended(record.status), record.step_id, {"type": record.type})

    def event(
        self, type: EventType, step_id: str | None = None, data: JsonDict | None = None
    ) -> None:
        self.progress.event_seq += 1
        event = RunEvent(
            seq=self.progress.event_seq,
            type=type,
            step_id=step_id,
            data=data or {},
            at=workflow.now(),
        )
        self.pending_events.append(event)
        run_metrics.on_event(self.spec, type, event.data)
        self.publish(event)  # workflow state, rebuilt on replay: no history grows

    def _snapshot(self) -> RunSnapshot:
        self.progress.version += 1
        return run_state.snapshot(
            self.run_id, self.spec, self.progress, workflow.now(), self.priority()
        )

    def priority(self) -> int:
        """The priority the server dispatches this run's steps at (inherited from the start,
        kept across continue-as-new)."""
        return workflow.info().priority.priority_key or fairness.DEFAULT_PRIORITY

    def take_batch(self) -> MirrorBatch:
        """What changed since the last mirror write, as one idempotent batch."""
        batch = MirrorBatch(
            run=self._snapshot(),
            steps=self.pending_steps,
            events=self.pending_events,
            fence=workflow.info().get_current_history_length(),
        )
        self.pending_steps, self.pending_events = [], []
        return batch

    def put_back(self, batch: MirrorBatch) -> None:
        """A batch that may not have landed: its rows go again with the next write, ahead of
        the newer ones (a second landing changes nothing: the writes are idempotent)."""
        self.pending_steps = batch.steps + self.pending_steps
        self.pending_events = batch.events + self.pending_events

    async def flush(self, *, trim: Trim = None) -> None:
        """Write what changed since the last flush to the mirror, as one idempotent batch."""
        batch = self.take_batch()
        try:
            await self._sync(trimmed(batch, trim))
        except ApplicationError as err:
            if payload_limits.is_too_large(err):
                # Refused before it was sent: keep its rows for the run's final write.
                self.put_back(batch)
            raise

    async def _sync(self, batch: MirrorBatch) -> None:
        self.mirror_writes = [w for w in self.mirror_writes if not w.done()]
        self.mirror_writes.append(
            workflow.start_activity_method(
                MirrorActivities.sync,
                batch,
                start_to_close_timeout=MIRROR_WRITE_TIMEOUT,
                retry_policy=MIRROR_RETRY,
                priority=MIRROR_PRIORITY,
                summary=run_summaries.mirror_summary(batch),
                task_queue=fairness.mirror_task_queue(workflow.info().task_queue),
            )
        )

    async def mirror_written(self) -> None:
        """Wait until every mirror write in flight has landed."""
        writes, self.mirror_writes = self.mirror_writes, []
        for write in writes:
            await write

    async def record_receipt(self) -> None:
        """The final mirror write and the receipt, in one activity (`mirror.finish`). If it
        would be refused as too large, it goes again with its long strings cut, so the run
        still ends recorded."""
        await self.mirror_written()  # the receipt comes after every row it sums up
        for trim in TRIMS:
            batch = self.take_batch()
            receipt = run_state.receipt(self.run_id, self.spec, self.progress, workflow.now())
            last = FinishInput(
                batch=trimmed(batch, trim),
                receipt=payload_limits.trimmed(receipt) if trim == "all" else receipt,
            )
            try:
                await self._store_receipt(last)
                return
            except ApplicationError as err:
                self.put_back(batch)
                if trim == "all" or not payload_limits.is_too_large(err):
                    raise
                if trim is None:
                    self.event(EventType.RUN_RECORD_TRIMMED, data={"reason": err.message})

    async def _store_receipt(self, receipt: FinishInput) -> None:
        try:
            await self._send_receipt(receipt)
        except ActivityError as err:
            # The activity stores the receipt before it returns it: only the echo was refused.
            if err.cause is None or not payload_limits.is_too_large(err.cause):
                raise

    async def _send_receipt(self, receipt: FinishInput) -> None:
        await workflow.execute_activity_method(
            MirrorActivities.finish,
            receipt,
            start_to_close_timeout=MIRROR_WRITE_TIMEOUT,
            retry_policy=MIRROR_RETRY,
            summary=f"receipt: {receipt.receipt.outcome.value}, with the last "
            f"{len(receipt.batch.steps)} step rows and {len(receipt.batch.events)} events",
        )
