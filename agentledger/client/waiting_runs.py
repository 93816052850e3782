"""Runs Temporal holds that no worker has taken yet: what `status`, `list` and `start` say of
them.

Such a run has no state a worker could report and no row in the mirror (a worker writes it),
yet it exists: Temporal has its input, its task queue and when it started. A person sees it
as queued, waiting for a worker, rather than as an error or not at all.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from agentledger.client.scope import Scope
from agentledger.core import constants as names
from agentledger.core import search_attributes
from agentledger.core._state import RunInput, RunProgress
from agentledger.core.results import RunState
from agentledger.core.spec import JsonDict
from agentledger.core.states import RunStatus
from agentledger.temporal.worker_presence import (
    NoAnswer,
    describe_pollers,
    pollers_or_unknown,
    start_a_worker,
    within,
)
from agentledger.workflows.run_state import state_view

# What `list` says of the agent of a run started without search attributes, which it cannot
# read until a worker takes the run.
UNINDEXED_AGENT = "(not indexed)"
# A run's first events up to its first workflow task; a run a worker took has its first
# WorkflowTaskCompleted among them.
FIRST_EVENTS = 20


async def untaken(
    client: Client, handle: WorkflowHandle[object, object], seconds: float
) -> tuple[RunState, datetime] | None:
    """The run as queued, and since when, if no worker has completed a task of it yet;
    None if one has (or the server cannot say in time)."""
    request = GetWorkflowExecutionHistoryRequest(
        namespace=client.namespace,
        execution=WorkflowExecution(workflow_id=handle.id),
        maximum_page_size=FIRST_EVENTS,
    )
    try:
        response = await within(
            seconds,
            client.workflow_service.get_workflow_execution_history(
                request, timeout=timedelta(seconds=seconds)
            ),
        )
    except (NoAnswer, RPCError):
        return None
    events = response.history.events
    if not events or any(
        e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED for e in events
    ):
        return None
    started = events[0]
    [spec] = await client.data_converter.decode(
        started.workflow_execution_started_event_attributes.input.payloads, [RunInput]
    )
    assert isinstance(spec, RunInput)
    since = started.event_time.ToDatetime(tzinfo=UTC)
    # The workflow's own projection of a run that has done nothing yet: queued.
    state = state_view(handle.id, spec, RunProgress(started_at=since), spec.priority)
    return state, since


async def unmirrored(
    scope: Scope, *, status: str | None, limit: int, wait: float
) -> list[JsonDict]:
    """Open runs Temporal holds that the mirror has not seen yet, newest first, as `list`
    shows runs: queued, since a run's first act once a worker takes it is its mirror row.
    Under a tenant, only runs indexed as that tenant's (a run started without search
    attributes cannot be shown to be one tenant's, so none sees it)."""
    if status not in (None, RunStatus.QUEUED.value):
        return []
    visible = scope.visibility_filter()
    if visible is None:
        return []
    client = await scope.temporal(wait)
    pool = await scope.database()
    query = f"WorkflowType = '{names.WORKFLOW_NAME}' AND ExecutionStatus = 'Running'" + visible
    held = [
        run
        async for run in client.list_workflows(query, limit=limit)
        if scope.sees(run.typed_search_attributes.get(search_attributes.TENANT))
    ]
    if not held:
        return []
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT run_id FROM runs WHERE run_id = ANY(%s)", ([run.id for run in held],)
        )
        seen = {row[0] for row in await cur.fetchall()}
    rows: list[JsonDict] = []
    for run in held:
        if run.id in seen:
            continue
        indexed = run.typed_search_attributes
        rows.append(
            {
                "run_id": run.id,
                "status": RunStatus.QUEUED.value,
                "tenant": indexed.get(search_attributes.TENANT),
                # Every start indexes its agent; a run started unindexed shows as no one's.
                "agent": indexed.get(search_attributes.AGENT) or UNINDEXED_AGENT,
                "priority": indexed.get(search_attributes.PRIORITY),
                "user_id": None,
                "task": None,
                "current_step_id": None,
                "tokens_in": 0,
                "tokens_out": 0,
                "cost_usd": 0.0,
                "duplicates_prevented": 0,
                "created_at": run.start_time,
                "finished_at": None,
            }
        )
    return rows


async def unserved(client: Client, task_queue: str, *, seconds: float) -> str | None:
    """A warning when no worker has polled `task_queue` lately: a run started on it waits."""
    now = datetime.now(UTC)
    found = await pollers_or_unknown(client, task_queue, seconds=seconds)
    if any(p.fresh(now) for p in found):
        return None
    return (
        f"{describe_pollers(task_queue, found, now)} lately: the run waits, queued, until a "
        f"worker takes it; {start_a_worker(task_queue)}"
    )
