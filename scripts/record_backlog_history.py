"""Record one AgentBacklog workflow history into tests/histories/, for the replay test.

Run after an intended change to agentledger/workflows/backlog.py:
`python scripts/record_backlog_history.py NAME` writes tests/histories/NAME.json (keep the old
files: backlogs in flight were started by the old code), and NAME_task_run.json, the history
of one task's run (a child of the backlog). It
starts its own in-memory Temporal dev server, embedded Postgres and scripted offline model,
and records the first run of a backlog that enqueues (a signal-with-start), stops (an update)
and resumes (a held signal) a running task, dead-letters a poison task, retries it (a held
signal), and continues as new. `python scripts/record_backlog_history.py NAME tenant-parts`
records instead a backlog of two tenants: acme's own policy and poison task stop acme's
tasks alone, globex's task runs on, and acme resumes its part (a held signal).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from temporalio.client import Client

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentledger.core import constants as names  # noqa: E402
from agentledger.core.backlog_models import (  # noqa: E402
    BacklogControlSignal,
    BacklogState,
    PolicyPatch,
    RetryInput,
    TaskItem,
    backlog_id,
)
from agentledger.core.errors import OperationError  # noqa: E402
from agentledger.core.spec import RunSpec  # noqa: E402
from agentledger.dev.offline_model import Reply, completion, offline_planner  # noqa: E402
from scripts.recording_stack import recording_worker  # noqa: E402
from tests import client_ops as bops  # noqa: E402
from tests import client_ops as ops  # noqa: E402

OUT = ROOT / "tests" / "histories"
AGENT = "history"
TASK_QUEUE = "record-backlog-history"
QUICK = {"allowed_tools": ["search_notes"]}
SLOW = {"documents": ["a", "b", "c", "d"], "seconds_per_document": 0.3}


def model(request: dict[str, Any]) -> Reply:
    """Indexes slowly for the task that asks to, else plans like the offline model."""
    task = next(m["content"] for m in request["messages"] if m["role"] == "user")
    if "Index" not in task:
        return offline_planner(request)
    if not any(m["role"] == "assistant" for m in request["messages"]):
        return completion(request, tool_calls=[("index_documents", SLOW)])
    return completion(request, content="## Summary\nIndexed the documents.")


def plan() -> list[TaskItem]:
    quick: dict[str, Any] = {"allowed_tools": ["search_notes"]}
    return [
        TaskItem(title="Index", idempotency_key="slow", spec=RunSpec(task="Index the documents")),
        TaskItem(
            title="Poison",
            idempotency_key="poison",
            max_attempts=2,
            spec=RunSpec(
                task="Summarize the invoice policy.",
                verify={"required_sections": ["## Never there"], "max_rounds": 1},
                **quick,
            ),
        ),
        TaskItem(title="Orders", idempotency_key="ok", spec=RunSpec(task="Orders?", **quick)),
    ]


async def until(probe: Callable[[], Awaitable[bool]], what: str) -> None:
    for _ in range(600):
        if await probe():
            return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"timed out waiting for {what}")


async def scenario(client: Client, task_queue: str) -> str:
    policy = PolicyPatch(retry_delay_seconds=0, continue_as_new_after=4)
    await bops.enqueue(client, AGENT, plan(), task_queue=task_queue, policy=policy)
    first_run = (await client.get_workflow_handle(backlog_id(AGENT)).describe()).run_id
    assert first_run is not None
    child = f"run-{AGENT}.slow.1"

    async def child_is(status: str) -> bool:
        try:
            return (await ops.status(client, child)).status.value == status
        except OperationError:
            return False

    await until(lambda: child_is("waiting_for_tool"), "the slow task's tool step")
    await bops.stop(client, AGENT)
    await until(lambda: child_is("paused"), "the slow task to pause")
    backlog = client.get_workflow_handle(backlog_id(AGENT))
    # The held path, as the server keeps it while no worker runs: a signal.
    await backlog.signal(
        names.SIGNAL_BACKLOG_RESUME, BacklogControlSignal(by="history", request_id="resume-1")
    )

    async def state() -> BacklogState:
        return await bops.state(client, AGENT)

    async def ended() -> bool:
        return [t.state for t in (await state()).tasks] == ["done", "failed", "done"]

    await until(ended, "slow and ok done, poison dead-lettered")
    await backlog.signal(
        names.SIGNAL_BACKLOG_RETRY, RetryInput(key="poison", by="history", request_id="retry-1")
    )

    async def continued() -> bool:
        return (await state()).generation == 1

    await until(continued, "the backlog to continue as new")
    return first_run


async def tenant_parts(client: Client, task_queue: str) -> str:
    never = {"required_sections": ["## Never there"], "max_rounds": 1}

    def task(key: str, tenant: str, **spec: Any) -> TaskItem:
        run = RunSpec(task=f"Summarize the {key} policy.", tenant=tenant, **QUICK, **spec)
        return TaskItem(title=key, idempotency_key=key, spec=run)

    acme = [task("poison", "acme", verify=never), task("next", "acme")]
    globex = [task("ok", "globex")]
    strict = PolicyPatch(max_attempts=1, on_poison="stop", retry_delay_seconds=0)
    await bops.enqueue(client, AGENT, acme, task_queue=task_queue, policy=strict, tenant="acme")
    await bops.enqueue(client, AGENT, globex, task_queue=task_queue, tenant="globex")
    first_run = (await client.get_workflow_handle(backlog_id(AGENT)).describe()).run_id
    assert first_run is not None

    async def states(want: list[str]) -> bool:
        return [t.state for t in (await bops.state(client, AGENT)).tasks] == want

    await until(lambda: states(["failed", "todo", "done"]), "acme's part to stop, globex's on")
    await client.get_workflow_handle(backlog_id(AGENT)).signal(
        names.SIGNAL_BACKLOG_RESUME,
        BacklogControlSignal(by="history", tenant="acme", own_tasks=True, request_id="resume-1"),
    )
    await until(lambda: states(["failed", "done", "done"]), "acme's next task after its resume")
    return first_run


SCENARIOS = {"default": scenario, "tenant-parts": tenant_parts}


async def main(name: str, which: str) -> None:
    async with recording_worker(model, TASK_QUEUE) as client:
        first_run = await SCENARIOS[which](client, TASK_QUEUE)
        handle = client.get_workflow_handle(backlog_id(AGENT), run_id=first_run)
        history = await handle.fetch_history()
        (OUT / f"{name}.json").write_text(history.to_json())
        print(f"recorded {name}: {len(history.events)} events")
        task_run = await client.get_workflow_handle(f"run-{AGENT}.ok.1").fetch_history()
        (OUT / f"{name}_task_run.json").write_text(task_run.to_json())
        print(f"recorded {name}_task_run: {len(task_run.events)} events")
        await client.get_workflow_handle(backlog_id(AGENT)).terminate("recorded")


if __name__ == "__main__":
    named = len(sys.argv) in (2, 3) and not sys.argv[1].startswith("-")
    if not named or sys.argv[2:] not in ([], *([s] for s in SCENARIOS)):
        sys.exit(
            "usage: python scripts/record_backlog_history.py NAME [default|tenant-parts] "
            "(e.g. backlog_current)"
        )
    asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) == 3 else "default"))
