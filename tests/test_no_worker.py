"""Every command with every worker killed: each answers within its bound; reads come from
the mirror and say so; each write is applied once a worker returns, or refused with exit 4 (a
service unreachable) naming the missing worker: never lost, never silently pending."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowFailureError

from agentledger.cli import render
from agentledger.core.backlog_models import TaskItem
from agentledger.core.config import AgentLedgerConfig
from agentledger.workflows import AgentRunWorkflow
from tests import client_ops as backlog_ops
from tests import client_ops as ops
from tests.support import (
    answered_status,
    eventually,
    make_spec,
    rows,
    run_result,
    wait_pending,
    wait_status,
)
from tests.test_cli import Result, run_cli
from tests.test_crash_recovery import start_worker_process

BOUND = 3.0
# A CLI process spends up to this long importing and connecting on a loaded 2-core machine.
STARTUP = 20.0


async def mirrored_waiting(pool: Any, run_id: str) -> None:
    """Until the mirror has the approval the run waits on (its writes trail the run)."""
    await eventually(
        lambda: rows(
            pool,
            "SELECT 1 FROM steps WHERE run_id = %s AND type = 'approval' AND status = 'waiting'",
            run_id,
        ),
        what=f"the mirror to show {run_id} waiting",
    )


@pytest.fixture
def timed_cli(settings: AgentLedgerConfig, tmp_path: Path) -> Any:
    home = tmp_path / "agentledger-home"

    async def call(*args: str) -> tuple[Result, float]:
        began = time.monotonic()
        result = await run_cli(settings, home, *args, "--wait", str(BOUND), seconds=60)
        return result, time.monotonic() - began

    return call


async def test_every_command_answers_with_the_workers_dead(
    client, settings, pool, worker, timed_cli, tmp_path
):
    doomed = await start_worker_process(settings, "doomed")
    try:
        runs = {}
        for name in ("approved", "rejected", "paused", "resumed", "cancelled"):
            started = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
            runs[name] = started.run_id
        for run_id in runs.values():
            await wait_pending(client, run_id, seconds=60)
            await mirrored_waiting(pool, run_id)
        await ops.control(
            client, runs["resumed"], "pause"
        )  # paused while a worker ran: resumed without
        agent = f"agent-{settings.task_queue}"
        spec = make_spec().model_copy(update={"idempotency_key": None})
        task = TaskItem(title="one", idempotency_key=f"{agent}-1", spec=spec)
        await backlog_ops.enqueue(client, agent, [task], task_queue=settings.task_queue)
    finally:
        doomed.send_signal(signal.SIGKILL)
        await doomed.wait()

    def answered(result: Result, seconds: float) -> Result:
        assert seconds < BOUND + STARTUP, f"took {seconds:.1f}s"
        assert "Traceback" not in result.err, result.err
        return result

    # Reads: from the mirror, saying so, with who last polled.
    status, seconds = await timed_cli("status", runs["approved"], "--json")
    shown = answered(status, seconds).json()
    assert status.code == 0, status.err
    assert shown["source"] == "mirror"
    assert shown["status"] == "waiting_for_approval"
    assert shown["priority"] == 3, "the mirror keeps the run's priority"
    assert shown["pending_approval"]["tool"] == "send_message"
    assert shown["task_queue"] == settings.task_queue
    assert shown["workers"], "the server still lists the dead worker's last poll"
    assert shown["no_progress_seconds"] is not None
    text, seconds = await timed_cli("status", runs["approved"])
    assert "mirror last saw it" in answered(text, seconds).out
    listed, seconds = await timed_cli("list", "--json")
    assert {r["run_id"] for r in answered(listed, seconds).json()} >= set(runs.values())
    stats, seconds = await timed_cli("stats", "--json")
    assert answered(stats, seconds).code == 0
    receipt, seconds = await timed_cli("receipt", runs["approved"])
    assert answered(receipt, seconds).code == 5 and "no receipt yet" in receipt.err

    # Run writes: recorded in the run's history, applied when a worker returns.
    recorded = {
        "approved": ("approve", runs["approved"], "--by", "li", "--role", "approver", "--json"),
        "rejected": (
            "reject",
            runs["rejected"],
            "--by",
            "li",
            "--role",
            "approver",
            "--reason",
            "not today",
            "--json",
        ),
        "paused": ("pause", runs["paused"], "--json"),
        "resumed": ("resume", runs["resumed"], "--json"),
    }
    for name, args in recorded.items():
        result, seconds = await timed_cli(*args)
        assert answered(result, seconds).code == 0, result.err
        assert "recorded" in json.dumps(result.json()), (name, result.out)
        if name == "paused":  # what the run was last seen doing: its search attribute
            assert result.json()["status"] == "waiting_for_approval", result.out
    cancel, seconds = await timed_cli("cancel", runs["cancelled"])
    assert answered(cancel, seconds).code == 0 and "cancel recorded" in cancel.out

    # Backlog writes go as signals the server keeps in the backlog's history: held, and
    # applied (with the update's checks) when a worker takes the backlog.
    tasks_file = tmp_path / "tasks.json"
    tasks_file.write_text(
        json.dumps([{"title": "two", "idempotency_key": f"{agent}-2", "spec": {"task": "x"}}])
    )
    for args in (
        ("backlog", "enqueue", "--agent", agent, str(tasks_file)),
        ("backlog", "stop", "--agent", agent),
        ("backlog", "retry", "--agent", agent, f"{agent}-1"),  # not failed: refused when applied
    ):
        result, seconds = await timed_cli(*args)
        assert answered(result, seconds).code == 0, (args, result.out, result.err)
        assert "held: the server keeps the" in result.out, result.out
        assert "agentledger-worker" in result.out and settings.task_queue in result.out

    # A worker returns: every recorded write applies; no refused one does.
    async with worker():
        approved = client.get_workflow_handle_for(AgentRunWorkflow.run, runs["approved"])
        assert (await asyncio.wait_for(approved.result(), 60)).status.value == "completed"
        rejected = await asyncio.wait_for(run_result(client, runs["rejected"]), 60)
        assert rejected.status.value == "cancelled"
        cancelled = client.get_workflow_handle_for(AgentRunWorkflow.run, runs["cancelled"])
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(cancelled.result(), 60)
        assert (await ops.receipt(pool, runs["cancelled"]))["outcome"] == "cancelled"

        async def pause_applied() -> bool:
            return (await ops.status(client, runs["paused"])).pause_requested

        await eventually(pause_applied, what="the recorded pause to apply")

        async def resume_applied() -> bool:
            return not (await ops.status(client, runs["resumed"])).pause_requested

        await eventually(resume_applied, what="the recorded resume to apply")

        async def backlog_applied() -> Any:
            backlog = await backlog_ops.state(client, agent)
            return backlog if backlog.stopped else None

        backlog = await eventually(backlog_applied, what="the held backlog writes to apply")
        assert [t.key for t in backlog.tasks] == [f"{agent}-1", f"{agent}-2"]
        assert [t.attempts for t in backlog.tasks] == [0, 0], "the refused retry changed nothing"
        live, _ = await timed_cli("status", runs["paused"], "--json")
        assert live.json()["source"] == "workflow"
        for name in ("paused", "resumed"):
            await ops.cancel(client, runs[name])
            await wait_status(client, runs[name], "cancelled")


async def test_a_recorded_decision_gets_the_same_checks(client, settings, pool, worker):
    """A decision recorded while no worker runs is judged when a worker applies it: a wrong
    role is refused then, the run keeps waiting, and `status` shows the refusal."""
    async with worker():
        started = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
        await wait_pending(client, started.run_id)
        await mirrored_waiting(pool, started.run_id)
    result = await ops.approve(
        client, started.run_id, by="li", role="intern", wait=BOUND, mirror=pool
    )
    assert result.decision == "recorded" and result.note and "applies it" in result.note
    async with worker():

        async def refusals() -> list[Any]:
            state = await answered_status(client, started.run_id)
            return state.refusals if state is not None else []

        [refusal] = await eventually(refusals, what="the refusal to be recorded")
        assert "needs role 'approver'" in refusal.reason and refusal.by == "li"
        state = await ops.status(client, started.run_id)
        assert state.status.value == "waiting_for_approval"
        assert "refused decision by li" in render.run_state(state), "`status` text shows it"
        await ops.approve(client, started.run_id, by="li", role="approver")
        handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
        assert (await handle.result()).status.value == "completed"


async def test_a_pause_recorded_for_a_run_no_worker_has_started_says_it_is_queued(client, settings):
    """Its search attribute shows only "running" and the mirror has no row of it yet: the
    pause is recorded, and the run is reported queued, not in a step it never took."""
    started = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
    try:
        result = await ops.control(client, started.run_id, "pause", wait=2)
        assert result.paused and result.status.value == "queued"
        assert "recorded" in result.message
    finally:
        await client.get_workflow_handle(started.run_id).terminate("test over")


async def test_approving_a_run_no_worker_has_started_names_its_status_as_status_does(
    client, settings, pool
):
    """The refusal says `queued`, the word `status` uses, not the search attribute's
    "running" (one status vocabulary, agentledger.types.RunStatus)."""
    from agentledger.core.errors import OperationRefused

    started = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
    try:
        with pytest.raises(OperationRefused, match=r"\(status queued\)"):
            await ops.approve(client, started.run_id, by="li", role="approver", wait=2, mirror=pool)
    finally:
        await client.get_workflow_handle(started.run_id).terminate("test over")
