"""Backlog writes survive worker restarts: an enqueue sent the moment a
worker is replaced is kept by the server and applied once by the worker that takes the
backlog; the command says whether it was applied or held; keys already there are ignored."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from agentledger.core import constants as names
from agentledger.core.backlog_models import backlog_id
from agentledger.temporal.worker_presence import pollers
from tests import client_ops as bops
from tests.backlog_support import end_backlog, item, new_agent, runs, wait_all_done
from tests.support import eventually
from tests.test_crash_recovery import start_worker_process

# Twelve replacements, half killed and half stopped, each with an enqueue the moment the new
# worker polls: every path (held by the server, applied by the next worker) is taken several
# times over.
RESTARTS = 12


async def replace_worker(
    client: Client,
    settings: Any,
    old: asyncio.subprocess.Process | None,
    identity: str,
    *,
    kill: bool,
) -> asyncio.subprocess.Process:
    """Stop the worker process (SIGKILL, or SIGTERM: it shuts down cleanly) and start
    another; return once the server has seen the new one poll."""
    if old is not None:
        old.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        await old.wait()
    new = await start_worker_process(settings, identity)

    async def polling() -> bool:
        found = await pollers(client, settings.task_queue, seconds=2)
        now = datetime.now(UTC)
        return any(p.identity == identity and p.fresh(now) for p in found)

    await eventually(polling, seconds=60, what=f"worker {identity} to poll")
    return new


@pytest.mark.timeout(900)
async def test_enqueue_at_each_of_a_dozen_worker_restarts_is_applied_once(client, settings, pool):
    """The worker process is replaced (killed, or stopped) twelve times; the moment each
    replacement polls, an enqueue is sent. Every one is held or applied, none refused, and
    each task is in the backlog once, in order."""
    agent = new_agent("restarts")
    keys = [f"{agent}-{i}" for i in range(RESTARTS + 1)]
    said = []
    process: asyncio.subprocess.Process | None = None
    try:
        process = await replace_worker(client, settings, None, "w-start", kill=True)
        first = await bops.enqueue(client, agent, [item(keys[0])], task_queue=settings.task_queue)
        assert first.added == [keys[0]] or first.held == [keys[0]], first
        for i in range(1, RESTARTS + 1):
            process = await replace_worker(client, settings, process, f"w-{i}", kill=i % 2 == 0)
            # Each enqueue sends its task and the one before (already there, or held ahead
            # of it): the second is never added twice.
            said.append(
                await bops.enqueue(
                    client,
                    agent,
                    [item(keys[i]), item(keys[i - 1])],
                    task_queue=settings.task_queue,
                    wait=5,
                )
            )
        for i, result in enumerate(said, start=1):
            # Every key is accounted for: applied (added or ignored) or held, never both.
            told = result.added + result.ignored + result.held
            assert sorted(told) == sorted([keys[i], keys[i - 1]]), result
            assert keys[i - 1] not in result.added, result
        done = await wait_all_done(pool, agent, len(keys), seconds=240)
        assert [t["task_key"] for t in done] == keys
        assert [t["ordinal"] for t in done] == list(range(1, len(keys) + 1))
        # Each task was enqueued once: one row, one ordinal (a run its killed worker was
        # running may have had a second attempt: that is the backlog's retry, not an enqueue).
        started = Counter(r["run_id"].split(".")[1] for r in await runs(pool, agent))
        assert set(started) == set(keys)
        assert all(t["launches"] == started[t["task_key"]] for t in done), (done, started)

        # The server held every enqueue: one signal per command, each applied once.
        generations = [
            w async for w in client.list_workflows(f"WorkflowId = '{backlog_id(agent)}'")
        ]
        signalled = 0
        for run in generations:
            history = await client.get_workflow_handle(run.id, run_id=run.run_id).fetch_history()
            signalled += sum(
                1
                for e in history.events
                if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
                and e.workflow_execution_signaled_event_attributes.signal_name
                == names.SIGNAL_BACKLOG_ENQUEUE
            )
        assert signalled == RESTARTS + 1
    finally:
        if process is not None and process.returncode is None:
            process.kill()
            await process.wait()
        await end_backlog(client, agent)


async def test_held_stop_resume_and_retry_apply_with_the_updates_checks(
    client, settings, pool, worker
):
    """With no worker, stop and a retry of a task that has not failed are held; the next
    worker applies the stop and refuses the retry; both answers said held, not done."""
    agent = new_agent("held")
    try:
        async with worker():
            await bops.enqueue(client, agent, [item(f"{agent}-a")], task_queue=settings.task_queue)
            await wait_all_done(pool, agent, 1)
        stopped = await bops.stop(client, agent, wait=2)
        assert stopped.message.startswith("held: the server keeps the stop"), stopped
        retried = await bops.retry(client, agent, f"{agent}-a", wait=2)
        assert retried.ordinal is None and retried.message.startswith("held:"), retried
        async with worker():

            async def applied():
                state = await bops.state(client, agent)
                return state if state.stopped else None

            state = await eventually(applied, what="the held stop to apply")
            assert [t.state for t in state.tasks] == ["done"], "the held retry was refused"
            resumed = await bops.resume(client, agent, wait=5)
            assert resumed.message == "resumed: the next task starts now"
    finally:
        await end_backlog(client, agent)
