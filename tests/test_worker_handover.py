"""A killed worker's replacement answers within the command's bound. A run stays bound to the
worker that last ran it (Temporal's sticky queue) and the server keeps sending its queries
there for about ten seconds after that worker's last poll; a command must not spend its whole
bound on a worker that is gone while a new one polls the run's queue. Each command here runs
with the default bound (10 s), as a user's does: without the fix a query waits on the dead
worker's queue for all of it (with 20 s the server's window ends in time, and it answers).

Not promised here: a workflow task the server had already put on the old worker's sticky
queue (a mirror write that lands just after the kill makes one) waits there for the SDK's
sticky timeout (10 s) before another worker may take it, and the run's queries wait behind it."""

from __future__ import annotations

import asyncio
import logging
import signal

import pytest
from temporalio.client import Client

from agentledger.core.errors import NotAnswered
from tests import client_ops as ops
from tests.support import eventually, make_spec, run_result, wait_pending
from tests.test_crash_recovery import start_worker_process


async def at_rest(client: Client, run_id: str) -> None:
    """Until the run has no workflow task pending (the wait this test does not promise) and no
    activity in flight (a mirror write that lands after the kill makes such a task)."""

    async def idle() -> bool:
        described = (await client.get_workflow_handle(run_id).describe()).raw_description
        return not described.HasField("pending_workflow_task") and not described.pending_activities

    await eventually(idle, what=f"{run_id} to have no workflow task pending")


async def test_status_and_approve_answer_after_a_worker_is_killed(client, settings, worker, caplog):
    caplog.set_level(logging.DEBUG, logger="agentledger.client.handles")  # the rounds, on failure
    doomed = await start_worker_process(settings, "doomed")
    try:
        started = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
        await wait_pending(client, started.run_id, seconds=60)
        await at_rest(client, started.run_id)
    finally:
        doomed.send_signal(signal.SIGKILL)
        assert await asyncio.wait_for(doomed.wait(), 30) == -signal.SIGKILL
    async with worker():
        state = await ops.status(client, started.run_id)
        assert state.pending_approval is not None
        await ops.approve(client, started.run_id, by="maria", role="approver")
        assert (await run_result(client, started.run_id)).status.value == "completed"


async def test_a_task_held_by_a_killed_worker_is_named_and_answered_after_the_sticky_timeout(
    client, settings, worker
):
    """The case not promised above: the run's next task is on the killed worker's sticky
    queue. A short wait says what may be going on and what to do; a longer one answers."""
    doomed = await start_worker_process(settings, "doomed")
    try:
        started = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
        await wait_pending(client, started.run_id, seconds=60)
        await at_rest(client, started.run_id)
        doomed.send_signal(signal.SIGSTOP)
        # A signal no handler takes (the SDK keeps it) makes a workflow task for the run's
        # worker, which is stopped and then killed with the task.
        handle = client.get_workflow_handle(started.run_id)
        await handle.signal("test-nudge")

        async def task_pending() -> bool:
            return (await handle.describe()).raw_description.HasField("pending_workflow_task")

        await eventually(task_pending, what=f"{started.run_id} to have a workflow task")
    finally:
        doomed.send_signal(signal.SIGKILL)
        assert await asyncio.wait_for(doomed.wait(), 30) == -signal.SIGKILL
    async with worker():
        with pytest.raises(NotAnswered, match="try again with a longer --wait"):
            await ops.status(client, started.run_id, wait=2)
        state = await ops.status(client, started.run_id, wait=30)
        assert state.pending_approval is not None
