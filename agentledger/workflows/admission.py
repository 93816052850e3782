"""TenantAdmission: one workflow per capped tenant, a durable FIFO semaphore over its runs.

A start for a capped tenant is an update here (update-with-start, so the first one creates
the queue). The update's validator refuses a start past the tenant's `max_queued` with the
limit named; an accepted start is recorded in history before the caller hears back, and the
handler starts the run at once as a child that waits in `queued`, so `status` finds it and no
start is lost. When a slot is free the oldest waiting run is signalled to go; each run
signals `admission.release` when it ends (or is cancelled while waiting). Nothing polls
while the queue moves: the workflow sleeps until a signal or an update changes it. Only
while runs wait behind a full cap does it ask Temporal, every `sweep_seconds`, whether an
admitted run closed without a word (a terminate runs none of its code), and frees its slot.
After a deploy the queue moves to the current build at its next continue-as-new; a start
that arrives first is turned away, and its sender wakes the queue (`admission.move`) so the
move happens then, whatever room the cap has, and tries again on the current build.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import FailureError, WorkflowAlreadyStartedError

from agentledger.workflows import run_starts

with workflow.unsafe.imports_passed_through():
    from agentledger.activities.admission import AdmissionActivities
    from agentledger.core import bounds, fairness, search_attributes
    from agentledger.core import constants as names
    from agentledger.core.admission_models import (
        AdmissionCarry,
        AdmissionInput,
        AdmitInput,
        HoldInput,
        MoveInput,
        PositionInput,
        QueuedStart,
        QueuedStartInput,
        QueuePosition,
        QueueRow,
        QueueState,
        QueueSyncInput,
        ReleaseInput,
        RunIdsInput,
        TenantLimits,
        admission_id,
    )

__all__ = ["TenantAdmissionWorkflow", "admission_id"]

SYNC_TIMEOUT = timedelta(seconds=10)
# Queues recorded before the sweep existed replay without its timers.
SWEEPS_CLOSED_RUNS = "admission-sweeps-closed-runs"


def upgrade_on_continue() -> workflow.ContinueAsNewVersioningBehavior | None:
    """A long-lived workflow pinned to a build moves to the current build at its next
    continue-as-new (AUTO_UPGRADE for the new run's first task, then pinned there);
    unversioned workers leave it unset."""
    if workflow.info().get_current_deployment_version() is None:
        return None
    return workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE


def _outcome_seen(outcome: asyncio.Future[Any]) -> None:
    if not outcome.cancelled():
        outcome.exception()


@workflow.defn(name=names.ADMISSION_WORKFLOW_NAME)
class TenantAdmissionWorkflow:
    @workflow.init
    def __init__(self, input: AdmissionInput) -> None:
        self.tenant = input.tenant
        self.limits = input.limits
        self.history_events_limit = input.history_events_limit
        self.sweep_seconds = input.sweep_seconds
        self.keeps_limits = input.keeps_limits
        carry = input.carry or AdmissionCarry()
        self.seq = carry.seq
        self.waiting = list(carry.waiting)  # run ids, oldest first
        self.seqs = dict(carry.seqs)
        self.in_flight = list(carry.in_flight)
        self.requests = dict(carry.requests)
        self.started: set[str] = set(carry.waiting)  # waiting runs whose child exists
        self.rows: list[QueueRow] = []
        self.writes: list[workflow.ActivityHandle[None]] = []
        self.tells: list[asyncio.Task[None]] = []  # admit signals on their way

    @workflow.run
    async def run(self, input: AdmissionInput) -> None:
        while True:
            if workflow.patched(SWEEPS_CLOSED_RUNS):
                if not await self._wait_or_sweep():
                    continue
            else:
                await workflow.wait_condition(lambda: self._next() is not None or self._too_long())
            run_id = self._next()
            if run_id is not None:
                self._admit(run_id)
                continue
            # Continue as new only at a moment when nothing is in flight: no message handler
            # (an enqueue whose run is starting), no admit signal, no queue write. Nothing
            # awaits between that check and continue_as_new, so nothing slips in between.
            await workflow.wait_condition(lambda: self._next() is not None or self._settled())
            if self._next() is not None:  # a handler that finished freed or filled a slot
                continue
            workflow.continue_as_new(
                AdmissionInput(
                    tenant=self.tenant,
                    limits=self.limits,
                    carry=AdmissionCarry(
                        seq=self.seq,
                        waiting=self.waiting,
                        seqs={r: self.seqs[r] for r in self.waiting},
                        in_flight=self.in_flight,
                        requests={
                            r: self.requests[r]
                            for r in (*self.waiting, *self.in_flight)
                            if r in self.requests
                        },
                    ),
                    history_events_limit=self.history_events_limit,
                    sweep_seconds=self.sweep_seconds,
                    keeps_limits=self.keeps_limits,
                ),
                initial_versioning_behavior=upgrade_on_continue(),
            )

    async def _wait_or_sweep(self) -> bool:
        """Wait for a free slot or the history limit (True); while runs wait behind a full
        cap, wake every `sweep_seconds` to free the slots of runs that closed (False)."""
        blocked = self._blocked()
        try:
            await workflow.wait_condition(
                lambda: self._next() is not None or self._too_long() or self._blocked() != blocked,
                timeout=timedelta(seconds=self.sweep_seconds) if blocked else None,
            )
        except TimeoutError:
            await self._sweep_closed()
            return False
        return self._next() is not None or self._too_long()

    def _blocked(self) -> bool:
        cap = self.limits.max_in_flight
        full = cap is not None and len(self.in_flight) >= cap
        return bool(self.waiting and self.in_flight) and full

    async def _sweep_closed(self) -> None:
        closed = await workflow.execute_activity_method(
            AdmissionActivities.closed_runs,
            RunIdsInput(run_ids=list(self.in_flight)),
            start_to_close_timeout=SYNC_TIMEOUT,
            retry_policy=fairness.MIRROR_RETRY,
            priority=fairness.MIRROR_PRIORITY,
        )
        for run_id in closed:
            if self._release(run_id):
                workflow.logger.warning("run %s closed holding its slot: slot freed", run_id)
        self._flush_soon()

    def _settled(self) -> bool:
        return (
            workflow.all_handlers_finished()
            and not self.rows
            and all(t.done() for t in self.tells)
            and all(w.done() for w in self.writes)
        )

    def _too_long(self) -> bool:
        """Time to continue as new: a long history, or a deploy made another build current
        (the queue moves to it, and starts its runs there, at its continue-as-new)."""
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() >= self.history_events_limit
            or info.is_target_worker_deployment_version_changed()
        )

    def _next(self) -> str | None:
        """The oldest waiting run, if a slot is free and its child has started."""
        cap = self.limits.max_in_flight
        if not self.waiting or (cap is not None and len(self.in_flight) >= cap):
            return None
        head = self.waiting[0]
        return head if head in self.started else None

    def _admit(self, run_id: str) -> None:
        self.waiting.pop(0)
        self.started.discard(run_id)
        self.in_flight.append(run_id)
        self._row(run_id, "admitted")
        self.tells = [t for t in self.tells if not t.done()]
        self.tells.append(asyncio.create_task(self._tell(run_id)))
        self._flush_soon()

    async def _tell(self, run_id: str) -> None:
        try:
            await workflow.get_external_workflow_handle(run_id).signal(
                names.SIGNAL_RUN_ADMIT, AdmitInput(admission_id=workflow.info().workflow_id)
            )
        except FailureError:
            # The run ended before it was told (terminated): its slot is free again.
            self._release(run_id)
            self._flush_soon()

    # ------------------------------------------------------------------ messages

    @workflow.update(name=names.UPDATE_ADMISSION_ENQUEUE)
    async def enqueue(self, request: QueuedStartInput) -> QueuedStart:
        run_id = request.run_id
        if run_id in self.seqs or run_id in self.in_flight:
            # A repeat of the start that queued it (a retried request) is not "existing".
            same = request.request_id is not None and (
                self.requests.get(run_id) == request.request_id
            )
            return QueuedStart(run_id=run_id, existing=not same, position=self._position(run_id))
        if not self.keeps_limits:
            self.limits = request.limits
        self.seq += 1
        self.seqs[run_id] = self.seq
        self.waiting.append(run_id)
        if request.request_id is not None:
            self.requests[run_id] = request.request_id
        # The start gate built the spec from its tenant's policy; it runs at the weight this
        # queue holds for the tenant.
        spec = request.spec.model_copy(
            update={"admission": workflow.info().workflow_id, "fairness_weight": self.limits.weight}
        )
        try:
            child = await run_starts.start_run(
                run_starts.from_gate(spec),
                run_id=run_id,
                task_queue=request.task_queue,
                parent_close_policy=workflow.ParentClosePolicy.ABANDON,
                search_attributes=search_attributes.for_run(
                    spec.agent, spec.tenant, "queued", spec.priority
                )
                if request.indexed
                else None,
            )
        except WorkflowAlreadyStartedError:
            self._forget(run_id)
            return QueuedStart(run_id=run_id, existing=True)
        except BaseException:
            self._forget(run_id)
            raise
        # The run tells its own end (release, or the sweep finds it closed): its outcome is
        # not the queue's, so it is read here only to keep a failed run's out of the log.
        child.add_done_callback(_outcome_seen)
        if run_id not in self.seqs:  # it ended (was cancelled) while it started
            return QueuedStart(run_id=run_id, existing=False)
        self.started.add(run_id)
        self._row(run_id, "waiting")
        self._flush_soon()
        return QueuedStart(run_id=run_id, existing=False, position=self._position(run_id))

    @enqueue.validator
    def _enqueue_allowed(self, request: QueuedStartInput) -> None:
        too_large = bounds.problems(request)
        if too_large:  # checked by the client too (agentledger.core.bounds): anyone may send
            raise ValueError(f"refused: {'; '.join(too_large[:5])}")
        if workflow.info().is_target_worker_deployment_version_changed():
            # A run started now would start on the old build (a pinned queue's children
            # inherit its build): the queue moves first, the sender tries again.
            raise ValueError(f"tenant {self.tenant!r}'s queue is {names.MOVING_TO_CURRENT_BUILD}")
        if request.spec.tenant != self.tenant:
            # The queue holds only its tenant's runs: a slot here is this tenant's to give.
            raise ValueError(
                f"tenant {self.tenant!r}'s queue does not take a run of {request.spec.tenant!r}"
            )
        known = request.run_id in self.seqs or request.run_id in self.in_flight
        limits = self.limits if self.keeps_limits else request.limits
        if known or limits.max_queued is None:
            return
        room = (limits.max_in_flight or 0) - len(self.in_flight)
        if len(self.waiting) - max(room, 0) >= limits.max_queued:
            raise ValueError(
                f"tenant {self.tenant!r} already has {len(self.waiting)} runs queued "
                f"(max_queued={limits.max_queued}, max_in_flight={limits.max_in_flight}): "
                "try again when its runs finish, or raise the limit with "
                f"`agentledger tenants set {self.tenant} --max-queued N`"
            )

    @workflow.update(name=names.UPDATE_ADMISSION_HOLD)
    def hold(self, request: HoldInput) -> QueuedStart:
        """A run its parent started, waiting for a slot (its `spec.admission` names this
        queue): it takes its place at the back, and is admitted in turn like the runs this
        queue started. A backlog's parallelism bounds how many of its runs wait, so
        `max_queued` does not refuse them (a refused task would only fail its attempt)."""
        run_id = request.run_id
        if run_id in self.seqs or run_id in self.in_flight:
            return QueuedStart(run_id=run_id, existing=True, position=self._position(run_id))
        self.seq += 1
        self.seqs[run_id] = self.seq
        self.waiting.append(run_id)
        self.started.add(run_id)
        self._row(run_id, "waiting")
        self._flush_soon()
        return QueuedStart(run_id=run_id, existing=False, position=self._position(run_id))

    @hold.validator
    def _hold_allowed(self, request: HoldInput) -> None:
        too_large = bounds.problems(request)
        if too_large:
            raise ValueError(f"refused: {'; '.join(too_large[:5])}")
        if request.tenant != self.tenant:
            raise ValueError(
                f"tenant {self.tenant!r}'s queue does not take a run of {request.tenant!r}"
            )

    @workflow.update(name=names.UPDATE_ADMISSION_CONFIGURE)
    def configure(self, limits: TenantLimits) -> QueuePosition:
        """New limits (`tenants set`): a higher cap admits waiting runs at once."""
        self.limits = limits
        return self._where("")

    @workflow.signal(name=names.SIGNAL_ADMISSION_RELEASE)
    def release(self, request: ReleaseInput) -> None:
        if self._release(request.run_id):
            self._flush_soon()

    @workflow.signal(name=names.SIGNAL_ADMISSION_MOVE)
    def move(self, request: MoveInput) -> None:
        """Nothing to change: this signal's workflow task re-reads every wait, and the loop
        sees the deploy (`_too_long`) whether the cap is full or has room."""

    @workflow.query(name=names.QUERY_ADMISSION_POSITION)
    def position(self, request: PositionInput) -> QueuePosition:
        return self._where(request.run_id)

    # ------------------------------------------------------------------ bookkeeping

    def _position(self, run_id: str) -> int | None:
        return self.waiting.index(run_id) + 1 if run_id in self.waiting else None

    def _where(self, run_id: str) -> QueuePosition:
        state: QueueState | None = None
        if run_id in self.waiting:
            state = "waiting"
        elif run_id in self.in_flight:
            state = "admitted"
        return QueuePosition(
            run_id=run_id,
            state=state,
            position=self._position(run_id),
            waiting=len(self.waiting),
            in_flight=len(self.in_flight),
            max_in_flight=self.limits.max_in_flight,
        )

    def _release(self, run_id: str) -> bool:
        if run_id in self.in_flight:
            self.in_flight.remove(run_id)
        elif run_id in self.waiting:
            self.waiting.remove(run_id)
            self.started.discard(run_id)
        else:
            self.seqs.pop(run_id, None)  # cancelled before its child start returned
            return False
        self._row(run_id, "released")
        self.seqs.pop(run_id, None)
        self.requests.pop(run_id, None)
        return True

    def _forget(self, run_id: str) -> None:
        if run_id in self.waiting:
            self.waiting.remove(run_id)
        self.seqs.pop(run_id, None)
        self.requests.pop(run_id, None)

    def _row(self, run_id: str, state: QueueState) -> None:
        self.rows.append(
            QueueRow(
                tenant=self.tenant,
                run_id=run_id,
                seq=self.seqs.get(run_id, 0),
                state=state,
                at=workflow.now(),
            )
        )

    def _flush_soon(self) -> None:
        """Mirror the moves so far; rows only move forward, so writes may land in any order."""
        self.writes = [w for w in self.writes if not w.done()]
        if self.rows:
            self.writes.append(self._sync())

    def _sync(self) -> workflow.ActivityHandle[None]:
        rows, self.rows = self.rows, []
        return workflow.start_activity_method(
            AdmissionActivities.sync,
            QueueSyncInput(rows=rows),
            start_to_close_timeout=SYNC_TIMEOUT,
            retry_policy=fairness.MIRROR_RETRY,
            priority=fairness.MIRROR_PRIORITY,
        )
