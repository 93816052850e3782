"""`client.backlogs`: an agent's queue of tasks, each a run in turn, for the caller's
tenant: enqueue, stop, resume, retry, inspect. Every failure becomes an
`OperationError` whose message says what to do next.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from agentledger.client import handles, starts
from agentledger.client.scope import Scope, describe_within, no_backlog
from agentledger.core import bounds
from agentledger.core.backlog_models import (
    AGENT_PATTERN,
    MAX_TASKS_PER_ENQUEUE,
    BacklogControlResult,
    BacklogControlSignal,
    BacklogInput,
    BacklogPolicy,
    BacklogState,
    Delivery,
    EnqueueInput,
    EnqueueResult,
    PolicyPatch,
    QueuedTask,
    RetryInput,
    RetryResult,
    TaskItem,
    backlog_id,
)
from agentledger.core.errors import (
    InvalidRequest,
    NotAnswered,
    OperationError,
    OperationRefused,
    RunNotFound,
)
from agentledger.core.listings import BacklogListing, DeadTask
from agentledger.core.messages import BacklogMessages, Message
from agentledger.core.spec import JsonDict
from agentledger.core.wire import ControlInput
from agentledger.core.yaml_files import load_yaml
from agentledger.store.backlog_store import BacklogStore
from agentledger.temporal.worker_presence import (
    Deadline,
    NoAnswer,
    fresh_pollers,
    no_worker,
    pollers_or_unknown,
    start_a_worker,
    within,
)
from agentledger.workflows.backlog import AgentBacklogWorkflow
from agentledger.workflows.changes import for_new_run

ENQUEUE_BATCH = 100
# Well under Temporal's 2 MB payload limit, whatever the tasks' sizes.
ENQUEUE_BATCH_BYTES = 512 * 1024
# The backlog workflow keeps its tasks' specs in its state and mirrors them in batches: an
# enqueue larger than this is refused, whole, before anything is sent.
MAX_ENQUEUE_BYTES = 1024 * 1024


def check_agent(agent: str) -> str:
    if not re.fullmatch(AGENT_PATTERN, agent):
        raise InvalidRequest(
            f"invalid agent name {agent!r}: use 1-64 letters, digits, '_' or '-', starting "
            "with a letter or digit"
        )
    return agent


# ---------------------------------------------------------------- backlog files


def load_tasks(path: str | Path) -> list[TaskItem]:
    """Read a JSON or YAML list of {title, idempotency_key, spec} into validated tasks.

    `spec` is a run spec mapping (no idempotency_key: the task's key names its runs), or a
    string (the task text), or left out (the title is the task text).
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise InvalidRequest(f"cannot read {path}: {err.strerror}") from err
    try:
        data = load_yaml(text)
    except yaml.YAMLError as err:
        raise InvalidRequest(f"{path} is not valid JSON or YAML: {err}") from err
    lines = _item_lines(text)
    if isinstance(data, dict) and set(data) == {"tasks"}:
        data = data["tasks"]
    if not isinstance(data, list) or not data:
        raise InvalidRequest(
            f"{path}: a backlog file is a non-empty list of tasks, each with title, "
            "idempotency_key and spec"
        )
    if len(data) > MAX_TASKS_PER_ENQUEUE:
        raise InvalidRequest(
            f"{path}: {len(data)} tasks; enqueue at most {MAX_TASKS_PER_ENQUEUE} per file"
        )
    tasks: list[TaskItem] = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(data, start=1):
        where = f"{path} task {i}" + (f" (line {lines[i - 1]})" if i <= len(lines) else "")
        if not isinstance(raw, dict):
            raise InvalidRequest(f"{where}: a task is a mapping with title, idempotency_key, spec")
        raw = dict(raw)
        spec = raw.get("spec", raw.get("title"))
        raw["spec"] = {"task": spec} if isinstance(spec, str) else spec
        try:
            task = TaskItem.model_validate(raw)
        except ValidationError as err:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'task'}: {e['msg']}" for e in err.errors()
            )
            raise InvalidRequest(f"{where}: {problems}") from err
        if task.idempotency_key in seen:
            raise InvalidRequest(
                f"{where}: idempotency_key {task.idempotency_key!r} is already used by task "
                f"{seen[task.idempotency_key]}; each task needs its own"
            )
        seen[task.idempotency_key] = i
        tasks.append(task)
    return tasks


def _item_lines(text: str) -> list[int]:
    """The line each top-level task starts on, to point at the one at fault (best effort)."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return []
    if isinstance(root, yaml.MappingNode):
        root = next((v for k, v in root.value if getattr(k, "value", None) == "tasks"), None)
    if not isinstance(root, yaml.SequenceNode):
        return []
    return [node.start_mark.line + 1 for node in root.value]


# ---------------------------------------------------------------- through Temporal


async def send_tasks(
    scope: Scope,
    agent: str,
    tasks: Sequence[TaskItem],
    *,
    policy: PolicyPatch | None = None,
    by: str = "cli",
    wait: float | None = None,
) -> EnqueueResult:
    """The engine's enqueue of tasks that passed the gate (`Backlogs.enqueue`, the only
    caller; tests call it to set up backlogs): at the end, in order; keys already in the
    backlog are ignored. Under a tenant, `policy` is that tenant's tasks' alone; its fields
    that bound the whole backlog (parallelism, continue_as_new_after) are an operator's.

    Each batch goes as a signal-with-start: the server keeps it in the backlog's history (and
    starts the backlog with it, if it runs not), whether or not a worker runs now, so an
    enqueue sent while workers restart is not lost; the next worker applies it once, in
    order, ignoring keys already there. Two people enqueueing at once still get one backlog.
    The result says what a worker applied within `wait`, and which keys the server holds.
    """
    check_agent(agent)
    tenant = scope.tenant
    wait = scope.bound(wait)
    client = await scope.temporal(wait)
    task_queue = scope.config.task_queue
    bounds.check(ControlInput(by=by), "enqueue")
    for i, item in enumerate(tasks, start=1):
        bounds.check(item, f"task {i}")
    if policy is not None:
        bounds.check(policy, "policy")
        shared = [] if scope.operator else policy.shared_fields()
        if shared:
            raise InvalidRequest(
                f"{', '.join(shared)} bound the whole backlog, whose other tasks may be other "
                f"tenants': an operator's to set, not one under AGENTLEDGER_TENANT={tenant}; "
                "leave them out (max attempts, retry delay and on-poison are your tasks' own)"
            )
    size = sum(len(task.model_dump_json().encode()) for task in tasks)
    if size > MAX_ENQUEUE_BYTES:
        raise InvalidRequest(
            f"these {len(tasks)} tasks come to {size:,} bytes, over the {MAX_ENQUEUE_BYTES:,} "
            "a backlog takes at once: enqueue them in parts, or keep large inputs in files "
            "the tasks name"
        )
    seen: dict[str, int] = {}
    for i, task in enumerate(tasks, start=1):
        if task.idempotency_key in seen:
            raise OperationError(
                f"tasks {seen[task.idempotency_key]} and {i} share the idempotency key "
                f"{task.idempotency_key!r}; each task needs its own"
            )
        seen[task.idempotency_key] = i
    policy = policy or PolicyPatch()
    queued = [
        QueuedTask.model_validate({**dict(task), "spec": for_new_run(task.spec)}) for task in tasks
    ]
    deadline = Deadline(wait)
    sent: list[tuple[str, list[QueuedTask]]] = []
    handle: WorkflowHandle[Any, Any] | None = None
    # In batches, so no single signal's payload nears Temporal's size limit.
    for tasks_in_batch in _batches(queued):
        batch = EnqueueInput(
            tasks=tasks_in_batch, policy=policy, by=by, request_id=uuid.uuid4().hex, tenant=tenant
        )
        try:
            handle = await within(
                deadline.left(),
                client.start_workflow(
                    AgentBacklogWorkflow.run,
                    # A tenant's policy is its tasks' own (sent with them), not the backlog's.
                    BacklogInput(
                        agent=agent,
                        policy=(policy if scope.operator else PolicyPatch()).apply(BacklogPolicy()),
                    ),
                    id=backlog_id(agent),
                    task_queue=task_queue,
                    id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                    start_signal=BacklogMessages.ENQUEUE.kept_signal,
                    start_signal_args=[batch],
                    rpc_timeout=timedelta(seconds=deadline.left()),
                ),
            )
        except (NoAnswer, RPCError) as err:
            why = (
                f"the server did not confirm it within {deadline.seconds:g}s"
                if isinstance(err, NoAnswer)
                else f"the server refused it ({err.message})"
            )
            held = [t.idempotency_key for _, batch_tasks in sent for t in batch_tasks]
            unsent = NotAnswered if isinstance(err, NoAnswer) else OperationRefused
            raise unsent(
                f"not sent: {why}"
                + (f"; the {len(held)} tasks before it are held by the backlog" if held else "")
                + f"; `backlog list --agent {agent}` shows what it has"
            ) from err
        assert batch.request_id is not None
        sent.append((batch.request_id, tasks_in_batch))
    assert handle is not None
    total = EnqueueResult(added=[], ignored=[], total=0, stopped=False)
    for request_id, tasks_in_batch in sent:
        delivery = await _delivery(client, handle, task_queue, request_id, deadline)
        if delivery is None or delivery.enqueued is None:
            total.held.extend(t.idempotency_key for t in tasks_in_batch)
            continue
        result = delivery.enqueued
        total = EnqueueResult(
            added=total.added + result.added,
            ignored=total.ignored + result.ignored,
            total=result.total,
            stopped=result.stopped,
            held=total.held,
        )
    if total.held:
        total.held_note = held_note(agent, task_queue, f"{len(total.held)} tasks")
    return total


# While a worker polls, how often a sender asks whether its held write was applied.
DELIVERY_POLL_SECONDS = 0.2


async def _delivery(
    client: Client,
    handle: WorkflowHandle[Any, Any],
    task_queue: str,
    request_id: str,
    deadline: Deadline,
) -> Delivery | None:
    """What the backlog made of a write sent as a signal, if a worker applies it within the
    bound; None when none does (the server holds it). With no worker polling (a worker that
    has just started is given a moment to send its first poll), no wait."""
    found = await fresh_pollers(client, task_queue, seconds=deadline.share(0.5))
    if not any(p.fresh(datetime.now(UTC)) for p in found):
        return None
    while deadline.left() > DELIVERY_POLL_SECONDS:
        try:
            delivery: Delivery | None = await within(
                deadline.left() - DELIVERY_POLL_SECONDS / 2,
                handle.query(
                    AgentBacklogWorkflow.delivery,
                    request_id,
                    rpc_timeout=timedelta(seconds=deadline.left()),
                ),
            )
        except (NoAnswer, RPCError, WorkflowQueryFailedError):
            # A worker that just started: the server offers the query to the old one's
            # sticky queue first. Ask again while the bound lasts.
            delivery = None
        if delivery is not None:
            return delivery
        await asyncio.sleep(DELIVERY_POLL_SECONDS)
    return None


def held_note(agent: str, task_queue: str, what: str) -> str:
    return (
        f"held: the server keeps the {what} in the backlog's history, and a worker applies it "
        f"once, with the same checks, when it takes the backlog of agent {agent} (none did "
        f"within the bound; {start_a_worker(task_queue)}); `backlog list --agent {agent}` "
        "shows the outcome"
    )


def _batches(tasks: list[QueuedTask]) -> list[list[QueuedTask]]:
    """Consecutive batches of at most ENQUEUE_BATCH tasks and ENQUEUE_BATCH_BYTES, in order."""
    batches: list[list[QueuedTask]] = [[]]
    size = 0
    for task in tasks:
        task_bytes = len(task.model_dump_json().encode())
        if batches[-1] and (
            len(batches[-1]) >= ENQUEUE_BATCH or size + task_bytes > ENQUEUE_BATCH_BYTES
        ):
            batches.append([])
            size = 0
        batches[-1].append(task)
        size += task_bytes
    return [batch for batch in batches if batch]


@dataclass
class Backlog:
    handle: WorkflowHandle[Any, Any]
    task_queue: str


async def _running(client: Client, agent: str, deadline: Deadline) -> Backlog:
    check_agent(agent)
    handle = client.get_workflow_handle(backlog_id(agent))
    try:
        description = await describe_within(handle, deadline)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise no_backlog(agent) from err
        raise
    if description.status != WorkflowExecutionStatus.RUNNING:
        status = description.status.name.lower() if description.status else "closed"
        raise OperationRefused(
            f"the backlog workflow of agent {agent} is {status}; `backlog enqueue --agent "
            f"{agent} FILE` starts it again from the mirror"
        )
    return Backlog(handle, description.task_queue)


async def _change(
    client: Client,
    agent: str,
    intent: Message,
    update_arg: ControlInput | RetryInput,
    signal_arg: BacklogControlSignal | RetryInput,
    wait: float,
) -> Any:
    """A stop, resume or retry: an update when a worker answers and the backlog takes it,
    else a signal the server keeps in the backlog's history (the answer says which), whose
    outcome the command reports if a worker applies it within the bound."""
    bounds.check(update_arg, "backlog command")  # checked again by the backlog's validators
    deadline = Deadline(wait)
    backlog = await _running(client, agent, deadline)
    try:
        await handles.ask_within(client, backlog.handle, AgentBacklogWorkflow.state, deadline)
        answered = True
    except NoAnswer:
        answered = False
    if answered:
        try:
            accepted = await handles.admit_update(
                client, backlog.handle, intent, update_arg, deadline.share(0.5)
            )
        except handles.NotAdmitted:
            pass
        else:
            try:
                return await within(
                    deadline.left(),
                    accepted.result(rpc_timeout=timedelta(seconds=deadline.left())),
                )
            except WorkflowUpdateFailedError as err:
                raise OperationError(f"refused: {handles.refusal(err)}") from err
            except (NoAnswer, WorkflowUpdateRPCTimeoutOrCancelledError, RPCError):
                return None
    await handles.signal_within(backlog.handle, intent, signal_arg, deadline)
    assert signal_arg.request_id is not None
    delivery = await _delivery(
        client, backlog.handle, backlog.task_queue, signal_arg.request_id, deadline
    )
    if delivery is not None and not delivery.applied:
        raise OperationError(f"refused: {delivery.message}")
    if delivery is not None:
        return delivery.control or delivery.retried
    return None


class Backlogs:
    """The caller's tasks in each agent's backlog: under a tenant, only its own (another
    tenant's task reads as a missing one)."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    @staticmethod
    def load_tasks(path: str | Path) -> list[TaskItem]:
        """The tasks of a JSON or YAML backlog file, checked, in order."""
        return load_tasks(path)

    async def enqueue(
        self,
        agent: str,
        tasks: list[TaskItem],
        *,
        policy: PolicyPatch | None = None,
        by: str = "cli",
        wait: float | None = None,
    ) -> EnqueueResult:
        """Add tasks at the end of the agent's backlog, in order (creating it). Each task
        runs for the caller's tenant (a task naming another is refused) under its tenant's
        policy (its approvers and weight), read through the gate (starts.py); under a tenant,
        `policy` is its own tasks' alone.

        Each batch goes as a signal-with-start: the server keeps it in the backlog's history
        (and starts the backlog with it, if it runs not), whether or not a worker runs now,
        so an enqueue sent while workers restart is not lost; the next worker applies it
        once, in order, ignoring keys already there. The result says what a worker applied
        within `wait`, and which keys the server holds."""
        queued = await starts.backlog_tasks(self.scope, tasks)
        return await send_tasks(self.scope, agent, queued, policy=policy, by=by, wait=wait)

    async def stop(
        self, agent: str, *, by: str = "cli", wait: float | None = None
    ) -> BacklogControlResult:
        """A graceful pause: running tasks stop at their next step boundary, none start.
        Under a tenant, of that tenant's tasks alone; other tenants' go on."""
        return await self._control(agent, True, by, wait)

    async def resume(
        self, agent: str, *, by: str = "cli", wait: float | None = None
    ) -> BacklogControlResult:
        """Continue a stopped backlog; under a tenant, that tenant's stopped tasks alone."""
        return await self._control(agent, False, by, wait)

    async def _control(
        self, agent: str, stopping: bool, by: str, wait: float | None
    ) -> BacklogControlResult:
        """A stop or a resume: an update, else a signal the server holds (`_change`)."""
        check_agent(agent)
        await self.scope.check_backlog(agent)
        tenant = self.scope.tenant
        own_tasks = not self.scope.operator
        wait = self.scope.bound(wait)
        client = await self.scope.temporal(wait)
        done = await _change(
            client,
            agent,
            BacklogMessages.STOP if stopping else BacklogMessages.RESUME,
            ControlInput(by=by, tenant=tenant, own_tasks=own_tasks),
            BacklogControlSignal(
                by=by, tenant=tenant, own_tasks=own_tasks, request_id=uuid.uuid4().hex
            ),
            wait,
        )
        if isinstance(done, BacklogControlResult):
            return done
        what = "stop" if stopping else "resume"
        return BacklogControlResult(
            stopped=stopping, tasks=[], message=held_note(agent, await _queue(client, agent), what)
        )

    async def retry(
        self, agent: str, task_key: str, *, by: str = "cli", wait: float | None = None
    ) -> RetryResult:
        """Put a dead-lettered task back, in its place, with a fresh set of attempts;
        another tenant's task reads as a missing one."""
        check_agent(agent)
        await self.scope.check_backlog(agent, task_key)
        tenant = self.scope.tenant
        wait = self.scope.bound(wait)
        client = await self.scope.temporal(wait)
        done = await _change(
            client,
            agent,
            BacklogMessages.RETRY,
            RetryInput(key=task_key, by=by, tenant=tenant),
            RetryInput(key=task_key, by=by, tenant=tenant, request_id=uuid.uuid4().hex),
            wait,
        )
        if isinstance(done, RetryResult):
            return done
        return RetryResult(
            key=task_key,
            ordinal=None,
            state=None,
            message=held_note(agent, await _queue(client, agent), f"retry of task {task_key}"),
        )

    async def tasks(self, agent: str) -> BacklogListing:
        """The backlog as the mirror last saw it, with every task (the caller's tenant's
        alone, under one) in order: state, attempts, last error, run, checkpoint; under a
        tenant with none there, no backlog."""
        store = BacklogStore(await self.scope.database())
        head = await self._known(store, agent)
        listing = {**head, "tasks": await store.tasks(agent, tenant=self.scope.tenant)}
        return BacklogListing.model_validate(listing)

    async def dead(self, agent: str) -> list[DeadTask]:
        """The tasks that used up their attempts (the caller's tenant's, under one)."""
        store = BacklogStore(await self.scope.database())
        await self._known(store, agent)
        dead = await store.dead_letters(agent, tenant=self.scope.tenant)
        return [DeadTask.model_validate(task) for task in dead]

    async def _known(self, store: BacklogStore, agent: str) -> JsonDict:
        """The backlog's head; under a tenant, a backlog with none of its tasks is not there."""
        check_agent(agent)
        head = await store.backlog(agent)
        if head is None or (
            not self.scope.operator and not await store.tasks(agent, tenant=self.scope.tenant)
        ):
            raise RunNotFound(
                f"agent {agent} has no backlog in the mirror: `backlog enqueue --agent {agent} "
                "FILE` creates it"
            )
        return head


async def live_state(scope: Scope, agent: str, *, wait: float | None = None) -> BacklogState:
    """The backlog's live state, from the workflow itself (a worker answers the query):
    every tenant's tasks, so an operator's read."""
    scope.refuse_unless_operator("a backlog's live state shows every tenant's tasks")
    deadline = Deadline(scope.bound(wait))
    client = await scope.temporal(deadline.seconds)
    backlog = await _running(client, agent, deadline)
    try:
        return await handles.ask_within(
            client, backlog.handle, AgentBacklogWorkflow.state, deadline, 1.0
        )  # type: ignore[no-any-return]
    except NoAnswer as err:
        found = await pollers_or_unknown(client, backlog.task_queue, seconds=deadline.share(0.2))
        raise NotAnswered(
            f"{no_worker(backlog.task_queue, found, deadline.seconds)}; `backlog list "
            f"--agent {agent}` shows the backlog as the mirror last saw it"
        ) from err


async def _queue(client: Client, agent: str) -> str:
    description = await client.get_workflow_handle(backlog_id(agent)).describe()
    return description.task_queue
