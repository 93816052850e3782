"""What people do with an agent's backlog: enqueue, stop, resume, retry, inspect.

The CLI is a thin shell over these; tests call them directly with their own client. Every
failure becomes an `OperationError` whose message says what to do next.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from psycopg_pool import AsyncConnectionPool
from pydantic import ValidationError
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from agentrun.core import bounds
from agentrun.core.backlog_models import (
    AGENT_PATTERN,
    MAX_TASKS_PER_ENQUEUE,
    BacklogControlResult,
    BacklogInput,
    BacklogPolicy,
    BacklogState,
    EnqueueInput,
    EnqueueResult,
    PolicyPatch,
    RetryInput,
    RetryResult,
    TaskItem,
    backlog_id,
)
from agentrun.core.errors import (
    InvalidRequest,
    NotAnswered,
    OperationError,
    OperationRefused,
    RunNotFound,
)
from agentrun.core.models import ControlInput, JsonDict
from agentrun.ops import handles
from agentrun.store.backlog_store import BacklogStore
from agentrun.temporal.worker_presence import (
    DEFAULT_WAIT_SECONDS,
    Deadline,
    NoAnswer,
    fresh_pollers,
    no_worker,
    pollers_or_unknown,
    within,
)
from agentrun.workflows.backlog import AgentBacklogWorkflow
from agentrun.workflows.changes import for_new_run

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
        data = yaml.safe_load(text)
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


async def enqueue(
    client: Client,
    agent: str,
    tasks: list[TaskItem],
    *,
    task_queue: str,
    policy: PolicyPatch | None = None,
    by: str = "cli",
    wait: float = DEFAULT_WAIT_SECONDS,
) -> EnqueueResult:
    """Add tasks at the end, in order; keys already in the backlog are ignored.

    The first enqueue for an agent starts its backlog workflow (update-with-start), so two
    people enqueueing at once still get one backlog.
    """
    check_agent(agent)
    bounds.check(ControlInput(by=by), "enqueue")
    for i, item in enumerate(tasks, start=1):
        bounds.check(item, f"task {i}")
    if policy is not None:
        bounds.check(policy, "policy")
    size = sum(len(task.model_dump_json().encode()) for task in tasks)
    if size > MAX_ENQUEUE_BYTES:
        raise InvalidRequest(
            f"these {len(tasks)} tasks come to {size:,} bytes, over the {MAX_ENQUEUE_BYTES:,} "
            "a backlog takes at once: enqueue them in parts, or keep large inputs in files "
            "the tasks name"
        )
    policy = policy or PolicyPatch()
    tasks = [task.model_copy(update={"spec": for_new_run(task.spec)}) for task in tasks]
    deadline = Deadline(wait)
    await _enqueue_served(client, agent, task_queue, deadline)
    total = EnqueueResult(added=[], ignored=[], total=0, stopped=False)
    # In batches, so no single update's payload nears Temporal's size limit.
    for tasks_in_batch in _batches(tasks):
        start = WithStartWorkflowOperation(
            AgentBacklogWorkflow.run,
            BacklogInput(agent=agent, policy=policy.apply(BacklogPolicy())),
            id=backlog_id(agent),
            task_queue=task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
        batch = EnqueueInput(tasks=tasks_in_batch, policy=policy, by=by)
        try:
            # The SDK's overloads do not see through an async update handler's return type.
            result: EnqueueResult = await within(
                deadline.left(),
                client.execute_update_with_start_workflow(
                    AgentBacklogWorkflow.enqueue,  # type: ignore[arg-type]
                    batch,
                    start_workflow_operation=start,
                    rpc_timeout=timedelta(seconds=deadline.left()),
                ),
            )
        except WorkflowUpdateFailedError as err:
            raise OperationRefused(f"refused: {handles.refusal(err)}") from err
        except (NoAnswer, WorkflowUpdateRPCTimeoutOrCancelledError) as err:
            raise NotAnswered(handles.held(backlog_id(agent), task_queue, deadline)) from err
        except RPCError as err:
            raise OperationError(f"cannot enqueue for agent {agent}: {err.message}") from err
        total = EnqueueResult(
            added=total.added + result.added,
            ignored=total.ignored + result.ignored,
            total=result.total,
            stopped=result.stopped,
        )
    return total


async def _enqueue_served(client: Client, agent: str, task_queue: str, deadline: Deadline) -> None:
    """Refuse, sending nothing, unless a worker would take the enqueue now."""
    try:
        backlog = await _running(client, agent, deadline)
    except OperationError:  # no backlog yet, or an ended one: a worker must poll the queue
        found = await fresh_pollers(client, task_queue, seconds=deadline.share(0.5))
        if not any(p.fresh(datetime.now(UTC)) for p in found):
            raise NotAnswered(
                f"not sent: {no_worker(task_queue, found, deadline.seconds)}"
            ) from None
        return
    await _served(client, backlog, deadline)


def _batches(tasks: list[TaskItem]) -> list[list[TaskItem]]:
    """Consecutive batches of at most ENQUEUE_BATCH tasks and ENQUEUE_BATCH_BYTES, in order."""
    batches: list[list[TaskItem]] = [[]]
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
        description = await handles.describe_within(handle, deadline)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise RunNotFound(
                f"agent {agent} has no backlog: `backlog enqueue --agent {agent} FILE` creates it"
            ) from err
        raise
    if description.status != WorkflowExecutionStatus.RUNNING:
        status = description.status.name.lower() if description.status else "closed"
        raise OperationRefused(
            f"the backlog workflow of agent {agent} is {status}; `backlog enqueue --agent "
            f"{agent} FILE` starts it again from the mirror"
        )
    return Backlog(handle, description.task_queue)


async def _served(client: Client, backlog: Backlog, deadline: Deadline) -> None:
    """Refuse, sending nothing, unless a worker answers the backlog now: its changes are
    updates, which the server would hold (not keep) while no worker runs."""
    try:
        await handles.ask_within(backlog.handle, AgentBacklogWorkflow.state, deadline)
    except NoAnswer as err:
        found = await pollers_or_unknown(client, backlog.task_queue, seconds=deadline.share(0.2))
        raise NotAnswered(
            f"not sent: {no_worker(backlog.task_queue, found, deadline.seconds)}"
        ) from err


async def _change(client: Client, agent: str, update: Any, arg: Any, wait: float) -> Any:
    bounds.check(arg, "backlog command")  # checked again by the backlog's validators
    deadline = Deadline(wait)
    backlog = await _running(client, agent, deadline)
    await _served(client, backlog, deadline)
    return await handles.update_within(backlog.handle, backlog.task_queue, update, arg, deadline)


async def stop(
    client: Client, agent: str, *, by: str = "cli", wait: float = DEFAULT_WAIT_SECONDS
) -> BacklogControlResult:
    """A graceful pause: running tasks stop at their next step boundary, none start."""
    return await _change(client, agent, AgentBacklogWorkflow.stop, ControlInput(by=by), wait)  # type: ignore[no-any-return]


async def resume(
    client: Client, agent: str, *, by: str = "cli", wait: float = DEFAULT_WAIT_SECONDS
) -> BacklogControlResult:
    return await _change(client, agent, AgentBacklogWorkflow.resume, ControlInput(by=by), wait)  # type: ignore[no-any-return]


async def retry(
    client: Client, agent: str, key: str, *, by: str = "cli", wait: float = DEFAULT_WAIT_SECONDS
) -> RetryResult:
    """Put a dead-lettered task back, in its place, with a fresh set of attempts."""
    return await _change(  # type: ignore[no-any-return]
        client, agent, AgentBacklogWorkflow.retry, RetryInput(key=key, by=by), wait
    )


async def state(client: Client, agent: str, *, wait: float = DEFAULT_WAIT_SECONDS) -> BacklogState:
    """The live state, from the workflow itself (a worker answers the query)."""
    deadline = Deadline(wait)
    backlog = await _running(client, agent, deadline)
    try:
        return await handles.ask_within(backlog.handle, AgentBacklogWorkflow.state, deadline, 1.0)  # type: ignore[no-any-return]
    except NoAnswer as err:
        found = await pollers_or_unknown(client, backlog.task_queue, seconds=deadline.share(0.2))
        raise NotAnswered(
            f"{no_worker(backlog.task_queue, found, deadline.seconds)}; `backlog list --agent "
            f"{agent}` shows the backlog as the mirror last saw it"
        ) from err


# ---------------------------------------------------------------- from the Postgres mirror


async def _known(store: BacklogStore, agent: str) -> JsonDict:
    check_agent(agent)
    head = await store.backlog(agent)
    if head is None:
        raise RunNotFound(
            f"agent {agent} has no backlog in the mirror: `backlog enqueue --agent {agent} "
            "FILE` creates it"
        )
    return head


async def list_tasks(pool: AsyncConnectionPool, agent: str) -> JsonDict:
    """The backlog and every task in order: state, attempts, last error, run, checkpoint."""
    store = BacklogStore(pool)
    head = await _known(store, agent)
    return {**head, "tasks": await store.tasks(agent)}


async def dead_letters(pool: AsyncConnectionPool, agent: str) -> list[JsonDict]:
    store = BacklogStore(pool)
    await _known(store, agent)
    return await store.dead_letters(agent)


def compact(value: Any, limit: int = 60) -> str:
    """One line of JSON (or text) for a table cell."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
