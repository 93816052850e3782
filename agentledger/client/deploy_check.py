"""`agentledger deploy check`: replay the runs open on the server against this checkout's code.

Temporal's advice before every deploy: a change that reorders, adds or removes what a
workflow does breaks every run already in flight, and only the histories of those runs can
tell. This fetches the history of every open workflow of the types the worker registers (and
of the N most recently closed, to catch what committed histories missed), replays each in the
workers' own sandbox with the client's data converter (so encrypted payloads decode as the
codec server decodes them) and reports, per run, ok or the first nondeterminism. It needs no
worker: the replay runs here.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecution, WorkflowHistory
from temporalio.converter import DataConverter
from temporalio.worker import Replayer

from agentledger.core import constants as names
from agentledger.core import version_branches
from agentledger.core.replay_verdicts import DeployCheck, ReplayVerdict
from agentledger.core.version_branches import BranchNeed, BranchUse, HistoryFacts, PatchInventory
from agentledger.workflows.engine import ENGINE_WORKFLOWS, sandboxed_runner

PAGE_SIZE = 200


def workflow_names(workflows: Sequence[type]) -> list[str]:
    names = []
    for each in workflows:
        definition = getattr(each, "__temporal_workflow_definition", None)
        if definition is None or definition.name is None:
            raise ValueError(f"{each!r} is not a named @workflow.defn class")
        names.append(definition.name)
    return names


async def executions(
    client: Client, names: list[str], *, task_queue: str, closed: int
) -> AsyncIterator[tuple[WorkflowExecution, bool]]:
    """Every open workflow of these types on the queue, page by page, then the `closed` most
    recent."""
    kinds = ", ".join(f"'{name}'" for name in names)
    ours = f"WorkflowType IN ({kinds}) AND TaskQueue = '{task_queue}'"
    opened = client.list_workflows(f'{ours} AND ExecutionStatus = "Running"', page_size=PAGE_SIZE)
    async for execution in opened:
        yield execution, True
    if closed > 0:
        ended = client.list_workflows(
            f'{ours} AND ExecutionStatus != "Running"',
            page_size=min(closed, PAGE_SIZE),
            limit=closed,
        )
        async for execution in ended:
            yield execution, False


async def check(
    client: Client,
    *,
    task_queue: str,
    workflows: Sequence[type] = ENGINE_WORKFLOWS,
    closed: int = 0,
    progress: Callable[[ReplayVerdict], Any] | None = None,
) -> DeployCheck:
    """Replay the open runs on `task_queue` (and its `closed` most recent closed ones) of the
    `workflows` a worker registers (the engine's, and a deployment's own beside them) against
    the code loaded in this process."""
    registered = list(workflows)
    replayer = Replayer(
        workflows=registered,
        data_converter=client.data_converter,
        workflow_runner=sandboxed_runner(),
    )
    verdicts = []
    names = workflow_names(registered)
    async for execution, is_open in executions(client, names, task_queue=task_queue, closed=closed):
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        history = await handle.fetch_history()
        found = version_branches.retired_needed(await facts_of(history, client.data_converter))
        if found:  # refused by name, not replayed along a path it never took
            need = BranchNeed(
                workflow_id=execution.id, run_id=execution.run_id, branch=found[0], retired=True
            )
            verdict = ReplayVerdict(
                workflow_id=execution.id,
                run_id=execution.run_id,
                workflow_type=execution.workflow_type,
                open=is_open,
                ok=False,
                error=need.message(),
                needs_retired=found,
            )
        else:
            result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
            failure = result.replay_failure
            verdict = ReplayVerdict(
                workflow_id=execution.id,
                run_id=execution.run_id,
                workflow_type=execution.workflow_type,
                open=is_open,
                ok=failure is None,
                event_id=event_of(str(failure)) if failure else None,
                error=first_message(str(failure)) if failure else None,
            )
        verdicts.append(verdict)
        if progress is not None:
            progress(verdict)
    return DeployCheck(verdicts=verdicts)


def first_message(error: str) -> str:
    """The SDK's own words from the core's failure dump ("[TMPRL1100] Nondeterminism error:
    Timer machine does not handle this event: HistoryEvent(id: 5, ActivityTaskScheduled)")."""
    found = re.search(r'message: "((?:[^"\\]|\\.)*)"', error)
    return found.group(1) if found else error


def event_of(error: str) -> int | None:
    """The event id a nondeterminism error names, where the SDK's message names one."""
    found = re.search(r"event(?:[ _]id)?[^0-9]{0,12}(\d+)", error, re.IGNORECASE)
    return int(found.group(1)) if found else None


async def facts_of(history: WorkflowHistory, converter: DataConverter) -> HistoryFacts:
    """What a history says about the paths its code took: the run workflow's generation (from
    its input, decoded as the codec server decodes it), its patch markers, whether its code ran
    and whether it started children."""
    started = history.events[0].workflow_execution_started_event_attributes
    kind = started.workflow_type.name
    generation = None
    if kind == names.WORKFLOW_NAME and started.input.payloads:
        [spec] = await converter.decode(started.input.payloads)
        if isinstance(spec, dict) and isinstance(spec.get("workflow_generation"), int):
            generation = spec["workflow_generation"]
    patches, decided, children = [], False, False
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            marker = event.marker_recorded_event_attributes
            if marker.marker_name == "core_patch" and "patch-data" in marker.details:
                data = marker.details["patch-data"].payloads[0].data
                patches.append(json.loads(data)["id"])
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            decided = True
        elif event.event_type == EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            children = True
    return HistoryFacts(
        workflow_type=kind,
        generation=generation,
        patches=patches,
        decided=decided,
        started_children=children,
    )


async def patch_inventory(
    client: Client, *, task_queue: str, workflows: Sequence[type] = ENGINE_WORKFLOWS
) -> PatchInventory:
    """Each live version branch and the open runs on `task_queue` that still need its old
    path, and the open runs that need a retired one."""
    uses = {branch.id: BranchUse(branch=branch, open_runs=[]) for branch in version_branches.LIVE}
    retired: list[BranchNeed] = []
    scanned = 0
    names_ = workflow_names(list(workflows))
    async for execution, _ in executions(client, names_, task_queue=task_queue, closed=0):
        scanned += 1
        history = await client.get_workflow_handle(
            execution.id, run_id=execution.run_id
        ).fetch_history()
        facts = await facts_of(history, client.data_converter)
        for branch in version_branches.live_old_paths(facts):
            uses[branch].open_runs.append(execution.id)
        for branch in version_branches.retired_needed(facts):
            retired.append(
                BranchNeed(
                    workflow_id=execution.id, run_id=execution.run_id, branch=branch, retired=True
                )
            )
    return PatchInventory(live=list(uses.values()), retired=retired, scanned=scanned)
