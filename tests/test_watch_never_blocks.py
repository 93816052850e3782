"""Watching never blocks control: watchers take none of a run's update
slots; approve, reject, pause, resume and cancel land however full the run's limits are;
and a command says a write is held only when the server confirmed it."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.contrib.workflow_streams import WorkflowStreamClient
from temporalio.testing import WorkflowEnvironment

from agentledger.client import handles
from agentledger.core import constants as names
from agentledger.core import search_attributes
from agentledger.core.errors import OperationError
from agentledger.core.messages import RunMessages
from agentledger.core.results import WatchItem
from agentledger.core.wire import ControlInput
from tests import client_ops as ops
from tests import client_ops as watch
from tests.conftest import running_worker
from tests.support import STARTUP_TIMEOUT, make_spec, wait_pending
from tests.test_watch import check_story, text_of

WATCHERS = 12
# The dev server's default: updates in flight per workflow.
UPDATE_SLOTS = 10


async def signals_in_history(client: Client, run_id: str) -> list[str]:
    """The decisions and controls the run's history holds as signals (model text published
    from an activity is a signal too; it is left out)."""
    history = await client.get_workflow_handle(run_id).fetch_history()
    return [
        e.workflow_execution_signaled_event_attributes.signal_name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        and not e.workflow_execution_signaled_event_attributes.signal_name.startswith("__")
    ]


async def follower(client, pool, run_id: str, seen: asyncio.Event) -> list[WatchItem]:
    items = []
    async for item in watch.watch(client, run_id, pool=pool):
        items.append(item)
        if item.type == "approval.requested":
            seen.set()
    return items


async def hold_update_slots(client: Client, run_id: str) -> list[asyncio.Task[Any]]:
    """Old-style watchers: the stream's long-poll update from an offset the run never
    reaches, each holding one of the run's update slots until the run ends."""

    async def hold() -> None:
        stream = WorkflowStreamClient.create(client, run_id)
        async for _ in stream.subscribe(from_offset=10**9):
            pass

    holders = [asyncio.create_task(hold()) for _ in range(UPDATE_SLOTS)]
    run = client.get_workflow_handle(run_id)
    for _ in range(100):  # until the server admits no more: every slot is taken
        try:
            await handles.admit_update(
                client, run, RunMessages.RESUME, ControlInput(by="probe"), 2.0
            )
        except handles.NotAdmitted as err:
            if "admits no more updates" in err.reason:
                return holders
        except OperationError:  # admitted and refused (not paused): a slot was still free
            pass
        await asyncio.sleep(0.2)
    raise AssertionError("the holders never filled the run's update slots")


def told_as(story: list[WatchItem]) -> tuple[list[WatchItem], dict[str | None, str]]:
    """A story's events in order, and each step's text as it ends shown."""
    steps = {i.step_id for i in story if i.kind == "text"}
    return [i for i in story if i.kind != "text"], {s: text_of(story, s) for s in steps}


async def test_a_dozen_watchers_leave_decisions_and_controls_their_updates(
    client, settings, pool, worker
):
    """Twelve watchers follow a run waiting for approval; pause, resume and approve are
    answered by the run itself (updates), not parked, and every watcher sees the whole
    story to its receipt."""
    async with worker():
        started = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
        seen = [asyncio.Event() for _ in range(WATCHERS)]
        watchers = [
            asyncio.create_task(follower(client, pool, started.run_id, each)) for each in seen
        ]
        await asyncio.wait_for(asyncio.gather(*(each.wait() for each in seen)), 60)

        paused = await ops.control(client, started.run_id, "pause", wait=5)
        assert paused.paused and paused.message == "the run pauses at its next step boundary"
        resumed = await ops.control(client, started.run_id, "resume", wait=5)
        assert resumed.message == "the run continues"
        decided = await ops.approve(client, started.run_id, by="li", role="approver", wait=5)
        assert decided.decision == "approved" and decided.note is None
        stories = await asyncio.wait_for(asyncio.gather(*watchers), 90)
    for story in stories:
        check_story(story)
        assert story[-1].kind == "receipt" and story[-1].data["outcome"] == "completed"
    # Every watcher saw the same story: the same events, and each step's text whole (in
    # pieces as its notices came, or from the row where it joined late or missed one).
    told = [told_as(story) for story in stories]
    assert told.count(told[0]) == WATCHERS
    # Nothing went as a signal: the updates were admitted while twelve watched.
    assert await signals_in_history(client, started.run_id) == []


async def test_with_every_update_slot_taken_decisions_and_controls_go_as_signals(
    client, settings, pool, worker
):
    """Ten old-style watchers hold every update slot the server gives a run. Pause, resume,
    a stale rejection and the approval still land, each as a signal the history holds, and
    each answer says so; the run completes with exactly the one approval."""
    async with worker():
        for attempt in (1, 2):
            started = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
            pending = await wait_pending(client, started.run_id)
            holders = await hold_update_slots(client, started.run_id)
            paused = await ops.control(client, started.run_id, "pause", wait=5)
            if attempt == 1 and not paused.message.startswith("recorded:"):
                # The server aborts the updates in flight when it drops a run's workflow task
                # (a loaded machine's worker answered too late): the slots were free for a
                # moment. Once more, on a fresh run; a second time is a failure.
                for each in holders:
                    each.cancel()
                await asyncio.gather(*holders, return_exceptions=True)
                await ops.cancel(client, started.run_id)
                continue
            break
        try:
            assert paused.message.startswith("recorded: the server admits no more updates")
            assert "went as a signal" in paused.message
            assert (await ops.status(client, started.run_id)).pause_requested
            resumed = await ops.control(client, started.run_id, "resume", wait=5)
            assert "went as a signal" in resumed.message
            assert not (await ops.status(client, started.run_id)).pause_requested

            with pytest.raises(OperationError, match="refused and recorded: stale approval"):
                await ops.reject(
                    client,
                    started.run_id,
                    by="mo",
                    role="approver",
                    reason="no",
                    action_hash="not-the-pending-one",
                    wait=5,
                )
            decided = await ops.approve(client, started.run_id, by="li", role="approver", wait=8)
            assert decided.decision == "approved", decided
            assert decided.approval_id == pending.approval_id
            assert decided.note and decided.note.startswith("sent as a signal")
            result = await asyncio.wait_for(ops.result(client, started.run_id), 60)
        finally:
            for each in holders:
                each.cancel()
            await asyncio.gather(*holders, return_exceptions=True)
    assert result.status.value == "completed"
    assert await signals_in_history(client, started.run_id) == [
        names.SIGNAL_PAUSE,
        names.SIGNAL_RESUME,
        names.SIGNAL_REJECT,
        names.SIGNAL_APPROVE,
    ]
    receipt = await ops.receipt(pool, started.run_id)
    approvals = receipt["approvals"]
    assert [(a["decision"], a["by"]) for a in approvals] == [("approved", "li")]


# ---------------------------------------------------------------- every limit spent

TOTAL_UPDATES = 2
TOTAL_SIGNALS = 2


@pytest.fixture(scope="module")
async def tight_env() -> AsyncIterator[WorkflowEnvironment]:
    """A dev server of its own whose per-run limits are tiny, so a test can spend them all:
    updates in flight, updates in total, and signals."""
    path = shutil.which("temporal")
    assert path
    env = await WorkflowEnvironment.start_local(
        # Three test processes start their servers at once on two cores: 5 s is not enough.
        dev_server_startup_timeout=STARTUP_TIMEOUT,
        dev_server_existing_path=path,
        data_converter=pydantic_data_converter,
        ui=False,
        dev_server_log_level="error",
        search_attributes=search_attributes.ALL,
        dev_server_extra_args=[
            "--dynamic-config-value",
            "history.maxInFlightUpdates=1",
            "--dynamic-config-value",
            f"history.maxTotalUpdates={TOTAL_UPDATES}",
            "--dynamic-config-value",
            f"history.maximumSignalsPerExecution={TOTAL_SIGNALS}",
        ],
    )
    yield env
    await env.shutdown()


async def test_with_every_limit_spent_a_decision_says_not_sent_and_cancel_still_lands(
    tight_env, settings, pool
):
    client = tight_env.client
    settings = settings.model_copy(
        update={
            "temporal_address": client.service_client.config.target_host,
            "task_queue": f"tight-{uuid.uuid4().hex[:8]}",
            # Model text streamed from an activity is a signal: none, so the test counts.
            "model_stream": False,
        }
    )
    async with running_worker(client, settings, pool):
        started = await ops.start_run(
            client, make_spec(), task_queue=settings.task_queue, indexed=False
        )
        await wait_pending(client, started.run_id)
        # Spend them: two updates (pause, resume), then two signals (pause, resume again,
        # sent as signals now that the run takes no more updates).
        assert (await ops.control(client, started.run_id, "pause")).message.startswith(
            "the run pauses"
        )
        assert (await ops.control(client, started.run_id, "resume")).message == "the run continues"
        assert "went as a signal" in (await ops.control(client, started.run_id, "pause")).message
        assert "went as a signal" in (await ops.control(client, started.run_id, "resume")).message

        with pytest.raises(OperationError) as refused:
            await ops.approve(client, started.run_id, by="li", role="approver", wait=5)
        assert str(refused.value).startswith("not sent: the server refused the signal")
        with pytest.raises(OperationError, match="not sent"):
            await ops.control(client, started.run_id, "pause", wait=5)
        # Nothing was claimed, and nothing was lost: the run still waits, undecided.
        state = await ops.status(client, started.run_id)
        assert state.pending_approval is not None and not state.pause_requested

        said = await ops.cancel(client, started.run_id, wait=5)
        assert said.startswith(f"cancel requested: {started.run_id}")
        # Temporal ends it Canceled; its result reads as cancelled all the same.
        ended = await asyncio.wait_for(ops.result(client, started.run_id), 60)
        described = await client.get_workflow_handle(started.run_id).describe()
    assert ended.status == "cancelled", ended
    assert described.status == WorkflowExecutionStatus.CANCELED
    receipt = await ops.receipt(pool, started.run_id)
    assert receipt["outcome"] == "cancelled"
    assert all(a["decision"] != "approved" for a in receipt.get("approvals", []))
