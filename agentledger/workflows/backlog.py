"""AgentBacklog: one long-running workflow per agent that works through its task list in order.

Each task attempt is an AgentRun child whose id is derived from the agent, the task's key and
the attempt number, so an attempt starts once however many workers serve the agent. A child's
history is the task's checkpoint: after a crash, Temporal resumes the child where it was and
its finished steps are not redone. The backlog continues as new before its history grows
large, between tasks, carrying only what it still needs.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import (
    ApplicationError,
    ChildWorkflowError,
    FailureError,
    WorkflowAlreadyStartedError,
)

from agentledger.workflows import run_endings, run_starts

with workflow.unsafe.imports_passed_through():
    from agentledger.activities.backlog import BacklogActivities
    from agentledger.core import bounds, fairness
    from agentledger.core import constants as names
    from agentledger.core.backlog_models import (
        SHARED_POLICY_FIELDS,
        BacklogControlResult,
        BacklogControlSignal,
        BacklogInput,
        BacklogLoadInput,
        BacklogPolicy,
        BacklogState,
        BacklogSyncInput,
        BacklogTask,
        Delivery,
        EnqueueInput,
        EnqueueResult,
        PolicyPatch,
        RetryInput,
        RetryResult,
        TaskState,
        TaskView,
        child_run_id,
        no_task,
        not_all_yours,
    )
    from agentledger.core.messages import BacklogMessages, Message, RunMessages
    from agentledger.core.states import RunStatus
    from agentledger.core.wire import ControlInput
    from agentledger.workflows.admission import upgrade_on_continue
    from agentledger.workflows.changes import for_new_run

# Deprecated patch id: each task's run is started at its own priority, with its tenant as
# fairness key (agentledger.core.fairness). Older backlogs started theirs at the default;
# a child's priority is not compared on replay, so they replay without
# that path, and the call stays only for the markers in their histories. Remove it once no
# open backlog has one.
CHILD_PRIORITY = "backlog-child-priority"
# Patch id: each task's run is started under its tenant's policy as Postgres holds it when the
# run starts (activity `tenants.policy`): its approvers and weight, a priority it may take,
# and, for a capped tenant, a wait in the tenant's admission queue. Backlogs recorded before
# replay their children's starts as they were.
CHILD_POLICY = "backlog-child-policy"
# Outcomes of held writes a backlog keeps for their senders to read.
KEPT_DELIVERIES = 200


def failure_text(err: ChildWorkflowError) -> str:
    cause = err.cause
    if isinstance(cause, FailureError) and cause.message:
        return cause.message
    return str(cause or err)


def _within_bounds(input: Any) -> None:
    """Refuse input with a field over its maximum (agentledger.core.bounds), before any of it
    lands in the backlog's state."""
    found = bounds.problems(input)
    if found:
        raise ApplicationError(f"refused: {'; '.join(found[:5])}")


def _part(input: ControlInput | BacklogControlSignal) -> str | None:
    """The tenant whose tasks alone a stop or resume acts on; None: every task (an
    operator's, or a tenant's recorded before tenants' parts, which asked for no part)."""
    return input.tenant if input.own_tasks else None


@workflow.defn(name=names.BACKLOG_WORKFLOW_NAME)
class AgentBacklogWorkflow:
    @workflow.init
    def __init__(self, input: BacklogInput) -> None:
        self.agent = input.agent
        self.policy = input.policy
        self.tasks: dict[str, BacklogTask] = {t.key: t for t in input.tasks}
        self.done_keys: set[str] = set(input.done_keys)
        self.next_ordinal = input.next_ordinal
        self.version = input.version
        self.stopped = input.stopped
        self.stop_reason = input.stop_reason
        self.generation = input.generation
        # A fresh start first asks the mirror: a terminated predecessor may have left rows.
        self.ready = input.carried
        self.in_flight: set[str] = set()
        self.children: dict[str, workflow.ChildWorkflowHandle[Any, Any]] = {}
        self.paused_by_us: set[str] = set()
        self.finished_here = 0
        self.crash: BaseException | None = None
        self.dirty: set[str] = set()
        self.unsynced_specs: set[str] = set()
        self.head_dirty = True
        self.flushing = 0  # mirror writes in flight: the run continues as new without any
        # Outcomes of writes sent as signals, by request id, for their senders (not carried).
        self.deliveries: dict[str, Delivery] = {}
        # Tenants of the enqueues taken but not yet applied (each waits its turn to run).
        self.arriving: list[set[str]] = []
        # A tenant's own policy and stop touch its tasks alone, whoever else has tasks here.
        self.tenant_policies: dict[str, PolicyPatch] = dict(input.tenant_policies)
        self.halted: dict[str, str] = dict(input.halted)

    # ------------------------------------------------------------------ the loop

    @workflow.run
    async def run(self, input: BacklogInput) -> None:
        if not self.ready:
            await self._recover()
            self.ready = True
        await self._flush()
        while True:
            await workflow.wait_condition(
                lambda: self._time_to_rotate() or self._next_task() is not None or self._crashed()
            )
            self._raise_crash()
            if self._time_to_rotate():
                break
            task = self._next_task()
            assert task is not None
            self.in_flight.add(task.key)
            self._set(task, "running")
            asyncio.create_task(self._guarded(task))  # noqa: RUF006 (in_flight tracks it)
        # Continue as new between tasks: a child must not outlive the run that awaits it.
        while True:
            await workflow.wait_condition(
                lambda: (
                    (not self.in_flight and not self.flushing and workflow.all_handlers_finished())
                    or self._crashed()
                )
            )
            self._raise_crash()
            if not self.dirty and not self.head_dirty:
                break
            await self._flush()
        workflow.continue_as_new(self._carry(), initial_versioning_behavior=upgrade_on_continue())

    async def _guarded(self, task: BacklogTask) -> None:
        try:
            await self._work(task)
        except BaseException as err:
            # A bug here must fail the workflow task (retried until a fix is deployed), not
            # vanish with a background task: the loop re-raises it.
            self.crash = err

    def _crashed(self) -> bool:
        return self.crash is not None

    def _raise_crash(self) -> None:
        if self.crash is not None:
            raise self.crash

    def _time_to_rotate(self) -> bool:
        """Time to continue as new: enough tasks done here, a long history, or a deploy made
        another build current (no task starts on the old build; the backlog moves to the
        current one once its runs in flight end, and starts the next there)."""
        info = workflow.info()
        return (
            self.finished_here >= self.policy.continue_as_new_after
            or info.is_continue_as_new_suggested()
            or info.is_target_worker_deployment_version_changed()
        )

    def _next_task(self) -> BacklogTask | None:
        if self.stopped or len(self.in_flight) >= self.policy.parallelism:
            return None
        return next(
            (t for t in self.tasks.values() if t.state == "todo" and not self._held(t)), None
        )

    @staticmethod
    def _tenant(task: BacklogTask) -> str | None:
        return task.spec.tenant if task.spec is not None else None

    def _held(self, task: BacklogTask) -> bool:
        """Stopped: the whole backlog, or the task's tenant's part of it."""
        return self.stopped or self._tenant(task) in self.halted

    def _policy_for(self, tenant: str | None) -> BacklogPolicy:
        """The backlog's policy with the tenant's own over it."""
        own = self.tenant_policies.get(tenant) if tenant is not None else None
        return own.apply(self.policy) if own is not None else self.policy

    async def _work(self, task: BacklogTask) -> None:
        """Attempts of one task, in place: the order holds while it is retried."""
        tenant = self._tenant(task)
        while True:
            await workflow.wait_condition(lambda: not self._held(task))
            error = await self._attempt(task)
            if error is None:
                task.spec = None  # never needed again; keeps carried state small
                self._set(task, "done", finished=True)
                break
            task.attempts += 1
            task.last_error = error
            policy = self._policy_for(tenant)
            if task.attempts >= task.max_attempts:
                self._set(task, "failed", finished=True)
                own = self.tenant_policies.get(tenant) if tenant is not None else None
                if own is not None and own.on_poison is not None:
                    # The tenant's own policy: its part stops, other tenants' tasks go on.
                    if own.on_poison == "stop" and tenant not in self.halted:
                        await self._stop(self._poison_reason(task, tenant), tenant)
                elif policy.on_poison == "stop" and not self.stopped:
                    await self._stop(self._poison_reason(task, None))
                break
            self._set(task, "paused" if self._held(task) else "running")
            await self._flush()
            if policy.retry_delay_seconds:
                await workflow.sleep(timedelta(seconds=policy.retry_delay_seconds))
        self.finished_here += 1
        self.in_flight.discard(task.key)  # the next task need not wait for the mirror
        await self._flush()

    def _poison_reason(self, task: BacklogTask, tenant: str | None) -> str:
        if tenant is None:
            return (
                f"task {task.key} failed {task.attempts} times; the policy stops the "
                "backlog (`backlog dead` shows why, `backlog resume` goes on)"
            )
        return (
            f"task {task.key} failed {task.attempts} times; tenant {tenant!r}'s policy stops "
            "its tasks (`backlog dead` shows why, `backlog resume` goes on)"
        )

    async def _attempt(self, task: BacklogTask) -> str | None:
        """One AgentRun child for the task; returns why it failed, or None when it completed."""
        if task.spec is None:  # only a task recovered from a damaged mirror
            return "its spec is lost; enqueue the task again under a new key"
        # The generation of the code starting it (a task queued before a deploy runs the
        # current one; a child's input is not checked on replay).
        spec = for_new_run(task.spec.model_copy(update={"idempotency_key": task.key}))
        run = run_starts.from_gate(spec)  # as the start gate built it when it was enqueued
        if workflow.patched(CHILD_POLICY):
            read = await run_starts.read_policy(spec)
            if isinstance(read, str):
                # No attempt would fare better: this one is the task's last.
                task.attempts = max(task.attempts, task.max_attempts - 1)
                return read
            run = read
        task.launches += 1
        task.run_id = child_run_id(self.agent, task.key, task.launches)
        task.started_at = workflow.now()
        self._set(task, "paused" if self._held(task) else "running")
        workflow.deprecate_patch(CHILD_PRIORITY)
        try:
            handle = await run_starts.start_run(
                run,
                run_id=task.run_id,
                summary=f"{self.agent} #{task.ordinal}: {task.title}",
            )
        except WorkflowAlreadyStartedError:
            await self._flush()
            return f"a run with id {task.run_id} already exists; it was not started again"
        self.children[task.key] = handle
        if self._held(task):  # a stop that came while the child was starting
            await self._signal_children([task.key], pause=True)
        await self._flush()
        try:
            result = await handle
        except ChildWorkflowError as err:
            carried = run_endings.result_of_failure(err.cause)
            if carried is None:
                return f"ended: {failure_text(err)}"
            result = carried
        finally:
            self.children.pop(task.key, None)
            self.paused_by_us.discard(task.key)
        if result.status == RunStatus.COMPLETED:
            return None
        return f"{result.status.value}: {result.error or 'no reason given'}"

    # ------------------------------------------------------------------ stop and resume

    async def _stop(self, reason: str, tenant: str | None = None) -> list[str]:
        """Stop the whole backlog, or (with `tenant`) that tenant's part of it."""
        if tenant is None:
            self.stopped, self.stop_reason = True, reason
        else:
            self.halted[tenant] = reason
        self.head_dirty = True
        keys = [
            k
            for k in sorted(self.in_flight)
            if self.tasks[k].state == "running"
            and (tenant is None or self._tenant(self.tasks[k]) == tenant)
        ]
        for key in keys:
            self._set(self.tasks[key], "paused")
        await self._signal_children(keys, pause=True)
        await self._flush()
        return keys

    async def _signal_children(self, keys: list[str], *, pause: bool) -> None:
        """Pause (or resume) running children at their next step boundary."""
        targets = [k for k in keys if k in self.children]
        if pause:
            self.paused_by_us.update(targets)
        else:  # a child that paused itself for a person stays paused
            targets = [k for k in targets if k in self.paused_by_us]
            self.paused_by_us.difference_update(targets)
        signal = (RunMessages.PAUSE if pause else RunMessages.RESUME).kept_signal
        by = ControlInput(by=f"backlog-{self.agent}")
        # A child that just ended refuses the signal; its result tells the rest.
        await asyncio.gather(
            *(self.children[k].signal(signal, by) for k in targets), return_exceptions=True
        )

    # ------------------------------------------------------------------ state and mirror

    def _set(self, task: BacklogTask, state: TaskState, *, finished: bool = False) -> None:
        task.state = state
        if finished:
            task.finished_at = workflow.now()
        self.dirty.add(task.key)

    async def _flush(self) -> None:
        """Write what changed since the last flush to the mirror, as one idempotent batch."""
        if not self.dirty and not self.head_dirty:
            return
        self.version += 1
        rows = [
            self.tasks[k].row(with_spec=k in self.unsynced_specs)
            for k in sorted(self.dirty, key=lambda k: self.tasks[k].ordinal)
        ]
        self.unsynced_specs -= self.dirty
        self.dirty, self.head_dirty = set(), False
        batch = BacklogSyncInput(
            agent=self.agent,
            version=self.version,
            stopped=self.stopped,
            stop_reason=self.stop_reason,
            policy=self.policy,
            generation=self.generation,
            updated_at=workflow.now(),
            tasks=rows,
        )
        self.flushing += 1
        try:
            await workflow.execute_activity_method(
                BacklogActivities.sync,
                batch,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=fairness.MIRROR_RETRY,  # the run's: retried until Postgres answers
            )
        finally:
            self.flushing -= 1

    async def _recover(self) -> None:
        mirrored = await workflow.execute_activity_method(
            BacklogActivities.load,
            BacklogLoadInput(agent=self.agent),
            start_to_close_timeout=timedelta(seconds=60),
            retry_policy=fairness.MIRROR_RETRY,  # the run's: retried until Postgres answers
        )
        if not mirrored.found:
            return
        self.version = max(self.version, mirrored.version)
        self.policy = mirrored.policy or self.policy
        self.stopped, self.stop_reason = mirrored.stopped, mirrored.stop_reason
        self.generation = mirrored.generation + 1
        self.next_ordinal = max(self.next_ordinal, mirrored.next_ordinal)
        self.done_keys.update(mirrored.done_keys)
        for task in sorted(mirrored.tasks, key=lambda t: t.ordinal):
            if task.state in ("running", "paused"):
                # Its run ended with the old workflow; the next attempt is a new run.
                task.state = "todo"
                self.dirty.add(task.key)
            self.tasks[task.key] = task

    def _carry(self) -> BacklogInput:
        done = self.done_keys | {k for k, t in self.tasks.items() if t.state == "done"}
        return BacklogInput(
            agent=self.agent,
            policy=self.policy,
            tasks=[t for t in self.tasks.values() if t.state != "done"],
            done_keys=sorted(done),
            next_ordinal=self.next_ordinal,
            version=self.version,
            stopped=self.stopped,
            stop_reason=self.stop_reason,
            generation=self.generation + 1,
            carried=True,
            tenant_policies=self.tenant_policies,
            halted=self.halted,
        )

    # ------------------------------------------------------------------ messages

    @workflow.query(name=names.QUERY_BACKLOG_STATE)
    def state(self) -> BacklogState:
        return BacklogState(
            agent=self.agent,
            stopped=self.stopped,
            stop_reason=self.stop_reason,
            policy=self.policy,
            generation=self.generation,
            done_earlier=len(self.done_keys),
            tasks=[
                TaskView(**t.model_dump(include=set(TaskView.model_fields)))
                for t in self.tasks.values()
            ],
        )

    @workflow.update(name=BacklogMessages.ENQUEUE.update_name)
    async def enqueue(self, input: EnqueueInput) -> EnqueueResult:
        return await self._enqueue(input)

    async def _enqueue(self, input: EnqueueInput) -> EnqueueResult:
        tenants = {t.spec.tenant for t in input.tasks}
        self.arriving.append(tenants)
        try:
            return await self._add(input)
        finally:
            self.arriving.remove(tenants)

    async def _add(self, input: EnqueueInput) -> EnqueueResult:
        await workflow.wait_condition(lambda: self.ready)
        if not input.policy.is_empty():
            if input.tenant is None:
                self.policy = input.policy.apply(self.policy)
            else:  # the sender's tasks' policy alone (the start gate refuses its shared fields)
                own = self.tenant_policies.get(input.tenant, PolicyPatch())
                per_task = input.policy.model_copy(update=dict.fromkeys(SHARED_POLICY_FIELDS))
                self.tenant_policies[input.tenant] = own.then(per_task)
            self.head_dirty = True
        added: list[str] = []
        ignored: list[str] = []
        for item in input.tasks:
            key = item.idempotency_key
            if key in self.tasks or key in self.done_keys:
                ignored.append(key)
                continue
            self.tasks[key] = BacklogTask(
                key=key,
                title=item.title,
                ordinal=self.next_ordinal,
                max_attempts=item.max_attempts or self._policy_for(item.spec.tenant).max_attempts,
                spec=item.spec,
                enqueued_at=workflow.now(),
            )
            self.next_ordinal += 1
            self.dirty.add(key)
            self.unsynced_specs.add(key)
            added.append(key)
        await self._flush()
        return EnqueueResult(
            added=added,
            ignored=ignored,
            total=len(self.tasks) + len(self.done_keys),
            stopped=self.stopped,
        )

    @enqueue.validator
    def _validate_enqueue(self, input: EnqueueInput) -> None:
        _within_bounds(input)
        seen: dict[str, int] = {}
        for i, item in enumerate(input.tasks, start=1):
            if item.idempotency_key in seen:
                raise ApplicationError(
                    f"tasks {seen[item.idempotency_key]} and {i} share the idempotency key "
                    f"{item.idempotency_key!r}; each task needs its own"
                )
            seen[item.idempotency_key] = i

    @workflow.update(name=BacklogMessages.STOP.update_name)
    async def stop(self, input: ControlInput) -> BacklogControlResult:
        return await self._stop_now(input.by, input.reason, _part(input))

    async def _stop_now(self, by: str, why: str | None, tenant: str | None) -> BacklogControlResult:
        reason = f"stopped by {by}" + (f": {why}" if why else "")
        keys = await self._stop(reason, tenant)
        whose = "" if tenant is None else f" tenant {tenant!r}'s tasks"
        return BacklogControlResult(
            stopped=True,
            tasks=keys,
            message=(
                f"stopping{whose}: {', '.join(keys)} pause at their next step boundary"
                if keys
                else f"stopped{whose}: no task was running; none will start until resume"
            ),
        )

    @stop.validator
    def _validate_stop(self, input: ControlInput) -> None:
        _within_bounds(input)
        self._check_control(input.tenant, True, parts=_part(input) is not None)

    def _check_tenant(self, tenant: str | None) -> None:
        """A stop or resume acts on every task: under a tenant (sent by a client acting for
        one; an operator sends none), refused while the backlog holds a task of another,
        or one whose tenant it no longer knows. The command checked the mirror first; this
        also sees a task whose enqueue the server held and applies just before (or is
        applying: an enqueue that came first counts before its tasks are in)."""
        if tenant is None:
            return
        if any(
            t.state != "done" and (t.spec is None or t.spec.tenant != tenant)
            for t in self.tasks.values()
        ) or any(tenants - {tenant} for tenants in self.arriving):
            raise ApplicationError(not_all_yours(self.agent, tenant))

    def _check_stop(self) -> None:
        if self.stopped:
            raise ApplicationError(
                f"the backlog of agent {self.agent} is already stopped ({self.stop_reason}); "
                f"`backlog resume --agent {self.agent}` continues it"
            )

    @workflow.update(name=BacklogMessages.RESUME.update_name)
    async def resume(self, input: ControlInput) -> BacklogControlResult:
        return await self._resume_now(_part(input))

    async def _resume_now(self, tenant: str | None) -> BacklogControlResult:
        """Resume the whole backlog (and every tenant's part), or one tenant's part."""
        if tenant is None:
            self.stopped, self.stop_reason = False, None
            self.halted.clear()
        else:
            self.halted.pop(tenant, None)
        self.head_dirty = True
        keys = [
            k
            for k in sorted(self.in_flight)
            if self.tasks[k].state == "paused"
            and not self._held(self.tasks[k])
            and (tenant is None or self._tenant(self.tasks[k]) == tenant)
        ]
        for key in keys:
            self._set(self.tasks[key], "running")
        await self._signal_children(keys, pause=False)
        await self._flush()
        whose = "" if tenant is None else f" tenant {tenant!r}'s tasks"
        return BacklogControlResult(
            stopped=False,
            tasks=keys,
            message=(
                f"resumed{whose}: {', '.join(keys)} continue from where they paused"
                if keys
                else f"resumed{whose}: the next task starts now"
            ),
        )

    @resume.validator
    def _validate_resume(self, input: ControlInput) -> None:
        _within_bounds(input)
        self._check_control(input.tenant, False, parts=_part(input) is not None)

    def _check_resume(self) -> None:
        if not self.stopped:
            raise ApplicationError(f"the backlog of agent {self.agent} is not stopped")

    @workflow.update(name=BacklogMessages.RETRY.update_name)
    async def retry(self, input: RetryInput) -> RetryResult:
        return await self._retry_now(input)

    async def _retry_now(self, input: RetryInput) -> RetryResult:
        task = self.tasks[input.key]
        task.attempts, task.finished_at = 0, None
        self._set(task, "todo")
        note = (
            f"; the backlog is stopped: `backlog resume --agent {self.agent}`"
            if self._held(task)
            else ""
        )
        result = RetryResult(
            key=task.key,
            ordinal=task.ordinal,
            state=task.state,
            message=f"task {task.key} (#{task.ordinal}) is back in the backlog{note}",
        )
        await self._flush()
        return result

    @retry.validator
    def _validate_retry(self, input: RetryInput) -> None:
        _within_bounds(input)
        task = self.tasks.get(input.key)
        if input.key in self.done_keys:
            raise ApplicationError(f"task {input.key} is done; only failed tasks can be retried")
        if task is None or (
            input.tenant is not None and (task.spec is None or task.spec.tenant != input.tenant)
        ):
            # Another tenant's task reads as a missing one.
            raise ApplicationError(no_task(self.agent, input.key))
        if task.state != "failed":
            raise ApplicationError(
                f"task {input.key} is {task.state}; only failed tasks (`backlog dead`) can be "
                "retried"
            )

    # ------------------------------------------------------------------ held writes

    # The same writes as signals (each intent's kept form, agentledger.core.messages):
    # the server keeps each in the backlog's history (a first enqueue starts the backlog
    # with it, signal-with-start) while no worker runs, and the next worker applies it once,
    # in order, with the update's checks; one that does not fit is refused the way its
    # update would be, and its refusal delivered to the sender's request id.

    @workflow.signal(dynamic=True)
    async def kept(self, name: str, args: Sequence[RawValue]) -> None:
        """A write's kept form, applied with its update's checks."""
        message = BacklogMessages.TABLE.kept(name)
        if message is None or len(args) != 1:
            workflow.logger.warning("backlog %s ignored an unknown signal %r", self.agent, name)
            return
        try:
            input = workflow.payload_converter().from_payload(args[0].payload, message.kept_as)
        except Exception:  # as the SDK drops a signal whose input it cannot read
            workflow.logger.exception("backlog %s dropped a %r it could not read", self.agent, name)
            return
        kept: dict[Message, Callable[[Any], Awaitable[None]]] = {
            BacklogMessages.ENQUEUE: self._kept_enqueue,
            BacklogMessages.STOP: self._kept_stop,
            BacklogMessages.RESUME: self._kept_resume,
            BacklogMessages.RETRY: self._kept_retry,
        }
        await kept[message](input)

    async def _kept_enqueue(self, input: EnqueueInput) -> None:
        tenants = {t.spec.tenant for t in input.tasks}
        self.arriving.append(tenants)
        try:
            if not await self._checked(input.request_id, lambda: self._validate_enqueue(input)):
                return
            result = await self._enqueue(input)
        finally:
            self.arriving.remove(tenants)
        self._deliver(
            Delivery(
                request_id=input.request_id or "",
                applied=True,
                message=f"added {len(result.added)}, ignored {len(result.ignored)}",
                enqueued=result,
            )
        )

    async def _kept_stop(self, input: BacklogControlSignal) -> None:
        part = _part(input)
        check = functools.partial(self._check_control, input.tenant, True, parts=bool(part))
        if not await self._checked(input.request_id, check):
            return
        done = await self._stop_now(input.by, input.reason, part)
        self._deliver(
            Delivery(
                request_id=input.request_id or "", applied=True, message=done.message, control=done
            )
        )

    async def _kept_resume(self, input: BacklogControlSignal) -> None:
        part = _part(input)
        check = functools.partial(self._check_control, input.tenant, False, parts=bool(part))
        if not await self._checked(input.request_id, check):
            return
        done = await self._resume_now(part)
        self._deliver(
            Delivery(
                request_id=input.request_id or "", applied=True, message=done.message, control=done
            )
        )

    async def _kept_retry(self, input: RetryInput) -> None:
        if not await self._checked(input.request_id, lambda: self._validate_retry(input)):
            return
        done = await self._retry_now(input)
        self._deliver(
            Delivery(
                request_id=input.request_id or "", applied=True, message=done.message, retried=done
            )
        )

    def _check_control(self, tenant: str | None, stopping: bool, *, parts: bool) -> None:
        """A stop or resume the backlog takes: with `parts`, a tenant's acts on its own
        tasks; else (an operator's, or one recorded before parts) on every task."""
        if parts and tenant is not None:
            self._check_part(tenant, stopping)
            return
        self._check_tenant(tenant)
        if stopping:
            self._check_stop()
        else:
            self._check_resume()

    def _check_part(self, tenant: str, stopping: bool) -> None:
        if stopping and tenant in self.halted:
            raise ApplicationError(
                f"tenant {tenant!r}'s tasks in the backlog of agent {self.agent} are already "
                f"stopped ({self.halted[tenant]}); `backlog resume --agent {self.agent}` "
                "continues them"
            )
        if not stopping and tenant not in self.halted:
            if self.stopped:
                raise ApplicationError(
                    f"the backlog of agent {self.agent} is stopped as a whole "
                    f"({self.stop_reason}); an operator's `backlog resume` continues it"
                )
            raise ApplicationError(
                f"tenant {tenant!r}'s tasks in the backlog of agent {self.agent} are not stopped"
            )

    async def _checked(self, request_id: str | None, check: Callable[[], None]) -> bool:
        """Wait until the backlog has its state (a fresh start reads the mirror first),
        then run the update's check; a refusal is delivered, not raised."""
        await workflow.wait_condition(lambda: self.ready)
        try:
            check()
        except ApplicationError as err:
            self._deliver(Delivery(request_id=request_id or "", applied=False, message=err.message))
            return False
        return True

    def _deliver(self, delivery: Delivery) -> None:
        if not delivery.request_id:
            return
        self.deliveries[delivery.request_id] = delivery
        while len(self.deliveries) > KEPT_DELIVERIES:
            del self.deliveries[next(iter(self.deliveries))]

    @workflow.query(name=names.QUERY_BACKLOG_DELIVERY)
    def delivery(self, request_id: str) -> Delivery | None:
        return self.deliveries.get(request_id)
