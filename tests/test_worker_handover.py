"""A killed worker's replacement answers within the command's bound. A run stays bound to the
worker that last ran it (Temporal's sticky queue) and the server keeps sending its queries
there for about ten seconds after that worker's last poll; a command must not spend its whole
bound on a worker that is gone while a new one polls the run's queue. Each command here runs
with the default bound (10 s), as a user's does: without the fix a query waits on the dead
worker's queue for all of it (with 20 s the server's window ends in time, and it answers).

Not promised here: a workflow task the server had already put on the old worker's sticky
queue waits there for the SDK's sticky timeout (10 s) before another worker may take it, and
the run's queries wait behind it."""

from __future__ import annotations

import asyncio
import signal

from temporalio.client import Client

from agentrun.ops import operations as ops
from tests.support import eventually, make_spec, run_result, wait_pending
from tests.test_crash_recovery import start_worker_process


async def at_rest(client: Client, run_id: str) -> None:
    """Until the run has no workflow task pending (the wait this test does not promise)."""

    async def idle() -> bool:
        described = await client.get_workflow_handle(run_id).describe()
        return not described.raw_description.HasField("pending_workflow_task")

    await eventually(idle, what=f"{run_id} to have no workflow task pending")


async def test_status_and_approve_answer_after_a_worker_is_killed(client, settings, worker):
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
