"""A worker killed with SIGKILL mid side effect: another worker finishes, the effect is once."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from agentledger.workflows import AgentRunWorkflow
from tests import client_ops as ops
from tests.support import eventually, make_spec, rows, wait_pending

ROOT = Path(__file__).resolve().parent.parent


async def start_worker_process(
    settings, identity: str, faults: str = ""
) -> asyncio.subprocess.Process:
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": settings.temporal_address,
        "DATABASE_URL": settings.database_url,
        "OPENAI_BASE_URL": settings.openai_base_url,
        "OPENAI_API_KEY": "test",
        "AGENTLEDGER_TASK_QUEUE": settings.task_queue,
        "AGENTLEDGER_FAULTS": faults,
    }
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "chaos.faulty_worker",
        "--demo",
        "--identity",
        identity,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )


async def test_sigkill_after_the_effect_does_not_repeat_it(client, settings, pool, worker):
    doomed = await start_worker_process(settings, "doomed", faults="tool.after_effect:send_message")
    try:
        spec = make_spec(timeouts={"heartbeat_seconds": 2, "initial_retry_seconds": 0.2})
        started = await ops.start_run(client, spec, task_queue=settings.task_queue)
        pending = await wait_pending(client, started.run_id, seconds=60)
        await ops.approve(client, started.run_id, by="li", role="approver")
        # The doomed worker sends the message, commits it, then dies before reporting.
        assert await asyncio.wait_for(doomed.wait(), 30) == -signal.SIGKILL
    finally:
        if doomed.returncode is None:
            doomed.kill()
            await doomed.wait()

    sent = await rows(pool, "SELECT id FROM outbox WHERE run_id = %s", started.run_id)
    assert len(sent) == 1, "the effect happened before the crash"
    held = await rows(
        pool, "SELECT worker, lease_until FROM active_steps WHERE run_id = %s", started.run_id
    )
    assert held and held[0]["worker"] == "doomed", "SQL shows who held the step, until when"

    async with worker():
        handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
        result = await asyncio.wait_for(handle.result(), 60)
        state = await ops.status(client, started.run_id)

    assert result.status.value == "completed"
    assert len(await rows(pool, "SELECT id FROM outbox WHERE run_id = %s", started.run_id)) == 1
    ledger = await rows(
        pool,
        "SELECT status, duplicates_prevented FROM tool_ledger WHERE run_id = %s",
        started.run_id,
    )
    assert ledger == [{"status": "done", "duplicates_prevented": 1}]

    tool_step = next(s for s in state.steps if s.type == "tool_call" and s.name == "send_message")
    assert tool_step.attempt == 2
    attempts = await rows(
        pool,
        "SELECT attempt, worker, status FROM step_attempts WHERE run_id = %s AND step_id = %s"
        " ORDER BY attempt",
        started.run_id,
        tool_step.step_id,
    )
    assert [(a["attempt"], a["worker"], a["status"]) for a in attempts] == [
        (1, "doomed", "running"),  # lost: never reported
        (2, client.identity, "succeeded"),
    ]
    receipt = await ops.receipt(pool, started.run_id)
    assert receipt["duplicates_prevented"] == 1
    assert receipt["side_effects"][0]["duplicate_prevented"] is True
    assert any("lost" in r["reason"] for r in receipt["retries"])
    assert pending.tool == "send_message"

    # The mirror agrees with the workflow, step for step, and nothing is left unfinished.
    mirrored = await rows(
        pool,
        "SELECT step_id, status, attempt, final FROM steps WHERE run_id = %s ORDER BY seq",
        started.run_id,
    )
    assert [(m["step_id"], m["status"], m["attempt"]) for m in mirrored] == [
        (s.step_id, s.status, s.attempt) for s in state.steps
    ]
    assert all(m["final"] for m in mirrored)
    await eventually(
        lambda: rows(
            pool, "SELECT 1 FROM runs WHERE run_id = %s AND status = 'completed'", started.run_id
        ),
        what="mirror shows completed",
    )
