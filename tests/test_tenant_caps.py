"""Per-tenant caps: runs over the cap wait durably in `queued`, in order, none lost; a start
past the hard limit is refused with the limit named."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from agentledger.client import admission as admission_ops
from agentledger.core._state import RunInput
from agentledger.core.admission_models import AdmissionInput, AdmitInput, TenantLimits
from agentledger.core.constants import SIGNAL_RUN_ADMIT
from agentledger.core.errors import OperationError
from agentledger.store.tenant_store import TenantStore
from agentledger.workflows import AgentRunWorkflow
from agentledger.workflows.admission import TenantAdmissionWorkflow, admission_id
from agentledger.workflows.changes import for_new_run
from tests import client_ops as ops
from tests import client_ops as tenant_ops
from tests.support import eventually, make_spec, rows, wait_pending, wait_status
from tests.test_cli import run_cli

# One model call, then a send_message that waits for approval: each run holds its slot
# until the test approves it.
TASK = "Notify ana@example.com that the refund went out."
ENDED = ("completed", "failed", "cancelled")


def capped(tenant: str, cap: int, queued: int | None = None) -> TenantLimits:
    return TenantLimits(tenant=tenant, max_in_flight=cap, max_queued=queued)


async def statuses(pool, tenant: str) -> dict[str, str]:
    found = await rows(pool, "SELECT run_id, status FROM runs WHERE tenant = %s", tenant)
    return {r["run_id"]: r["status"] for r in found}


async def test_cap_holds_under_50_concurrent_starts(client, settings, pool, worker):
    tenant, cap, total = f"t-{uuid.uuid4().hex[:8]}", 5, 50
    limits = capped(tenant, cap)
    # The queue continues as new every 200 events or so, several times during the burst.
    await client.start_workflow(
        TenantAdmissionWorkflow.run,
        AdmissionInput(tenant=tenant, limits=limits, history_events_limit=200),
        id=admission_id(tenant),
        task_queue=settings.task_queue,
    )
    specs = [make_spec(TASK, tenant=tenant, allowed_tools=["send_message"]) for _ in range(total)]
    async with worker():
        started = await asyncio.gather(
            *(
                ops.start_run(client, s, task_queue=settings.task_queue, limits=limits)
                for s in specs
            )
        )
        assert not any(s.existing for s in started)
        run_ids = {s.run_id for s in started}
        assert len(run_ids) == total

        # Enqueue order, as the tenant's queue accepted the 50 racing starts.
        async def all_recorded():
            found = await rows(
                pool, "SELECT run_id, seq FROM tenant_queue WHERE tenant = %s", tenant
            )
            return found if len(found) == total else None

        order = [r["run_id"] for r in sorted(await all_recorded_or_fail(all_recorded), key=_seq)]
        assert set(order) == run_ids  # none lost

        finished = 0
        while finished < total:
            expected = min(cap, total - finished)

            async def settled(expected=expected):
                now = await statuses(pool, tenant)
                waiting = [r for r, s in now.items() if s == "waiting_for_approval"]
                moving = [r for r, s in now.items() if s not in ("queued", *ENDED)]
                assert len(moving) <= cap, f"{len(moving)} runs in flight, cap {cap}"
                if len(now) < total:  # a run's first mirror write has not landed yet
                    return None
                return (now, waiting) if len(waiting) == expected == len(moving) else None

            now, waiting = await eventually(settled, what=f"{expected} runs at the gate")
            past_queue = [r for r in order if now[r] != "queued"]
            # The runs that left the queue are exactly the oldest ones: order kept.
            assert past_queue == order[: len(past_queue)]
            if finished == 0:
                queued = await ops.status(client, order[cap])
                assert queued.status.value == "queued" and queued.queue_position == 1

                # The queue mirrors its moves without waiting (agentledger/workflows/admission.py):
                # the runs at the gate may be there before the row saying they left the queue.
                async def second_in_line() -> bool:
                    sql = await rows(
                        pool,
                        "SELECT position FROM tenant_queue_positions WHERE run_id = %s",
                        order[cap + 1],
                    )
                    return sql == [{"position": 2}]

                await eventually(second_in_line, what="the mirror to show the next in line")
            await asyncio.gather(
                *(ops.approve(client, r, by="maria", role="approver") for r in waiting)
            )
            for run_id in waiting:
                handle = client.get_workflow_handle_for(AgentRunWorkflow.run, run_id)
                assert (await handle.result()).status.value == "completed"
            finished += len(waiting)

        async def all_released() -> bool:
            # The last runs' releases reach the queue's mirror after the runs have ended, from
            # the queue's own activity: the worker stays up until they have.
            released = await rows(
                pool,
                "SELECT count(*) AS n FROM tenant_queue WHERE tenant = %s AND state = 'released'",
                tenant,
            )
            return released == [{"n": total}]

        await eventually(all_released, what=f"all {total} slots released in the queue's mirror")

    # From the runs' own clocks: never more than `cap` between admission and finish.
    events = await rows(
        pool,
        """SELECT e.run_id, e.type, e.created_at AS at FROM events e JOIN runs r USING (run_id)
           WHERE r.tenant = %s AND e.type IN ('run.admitted', 'run.finished')""",
        tenant,
    )
    assert len(events) == 2 * total
    level, peak = 0, 0
    for event in sorted(events, key=lambda e: (e["at"], e["type"] == "run.admitted")):
        level += 1 if event["type"] == "run.admitted" else -1
        peak = max(peak, level)
    assert peak <= cap

    description = await client.get_workflow_handle(admission_id(tenant)).describe()
    info = description.raw_description.workflow_execution_info
    assert info.first_run_id != description.run_id, "the queue continued as new"


def _seq(row):
    return row["seq"]


async def all_recorded_or_fail(probe):
    return await eventually(probe, what="every start in the tenant's queue")


async def test_start_past_the_hard_limit_is_refused(client, settings, pool, worker):
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    limits = capped(tenant, 1, queued=1)
    first, second, third = (
        make_spec(TASK, tenant=tenant, allowed_tools=["send_message"]) for _ in range(3)
    )
    async with worker():
        a = await ops.start_run(client, first, task_queue=settings.task_queue, limits=limits)
        await wait_pending(client, a.run_id)
        b = await ops.start_run(client, second, task_queue=settings.task_queue, limits=limits)
        assert b.queue_position == 1
        with pytest.raises(OperationError, match=r"max_queued=1"):
            await ops.start_run(client, third, task_queue=settings.task_queue, limits=limits)
        # The same key again is the same run, not a refusal.
        again = await ops.start_run(client, second, task_queue=settings.task_queue, limits=limits)
        assert again.run_id == b.run_id and again.existing
        # Cancelling a queued run frees its place; it ends with a receipt.
        await ops.cancel(client, b.run_id)
        await wait_status(client, b.run_id, "cancelled")

        async def place_freed():
            place = await admission_ops.position(client, admission_id(tenant), b.run_id)
            return place is not None and place.waiting == 0

        await eventually(place_freed, what="the cancelled run's place to be freed")
        c = await ops.start_run(client, third, task_queue=settings.task_queue, limits=limits)
        assert c.queue_position == 1
        await ops.approve(client, a.run_id, by="maria", role="approver")
        await wait_pending(client, c.run_id)
        await ops.approve(client, c.run_id, by="maria", role="approver")
        await wait_status(client, c.run_id, "completed")
    refused = await rows(pool, "SELECT count(*) AS n FROM runs WHERE tenant = %s", tenant)
    assert refused == [{"n": 3}]  # the refused start left nothing behind


async def test_cli_refuses_with_exit_2_naming_the_limit(
    client, settings, pool, worker, tmp_path: Path
):
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    await TenantStore(pool).save(capped(tenant, 1, queued=0))
    args = ["start", "--task", TASK, "--tenant", tenant, "--spec"]
    spec = tmp_path / "spec.yaml"
    spec.write_text("allowed_tools: [send_message]\n")
    async with worker():
        ok = await run_cli(settings, tmp_path, *args, str(spec), "--json")
        assert ok.code == 0, ok.err
        await wait_pending(client, ok.json()["run_id"])
        refused = await run_cli(settings, tmp_path, *args, str(spec))
        assert refused.code == 5  # refused by the tenant's policy
        assert "max_queued=0" in refused.err and "tenants set" in refused.err
        await ops.approve(client, ok.json()["run_id"], by="maria", role="approver")
        await wait_status(client, ok.json()["run_id"], "completed")


async def test_the_queue_continues_as_new_and_keeps_its_order(client, settings, pool, worker):
    tenant, cap, total = f"t-{uuid.uuid4().hex[:8]}", 1, 12
    limits = capped(tenant, cap)
    # A queue that continues as new every 100 events or so: several times in this test.
    await client.start_workflow(
        TenantAdmissionWorkflow.run,
        AdmissionInput(tenant=tenant, limits=limits, history_events_limit=100),
        id=admission_id(tenant),
        task_queue=settings.task_queue,
    )
    specs = [make_spec(TASK, tenant=tenant, allowed_tools=["send_message"]) for _ in range(total)]
    async with worker():
        order = []
        for spec in specs:  # one at a time, so the order is the start order
            started = await ops.start_run(
                client, spec, task_queue=settings.task_queue, limits=limits
            )
            order.append(started.run_id)
        for position, run_id in enumerate(order):
            await wait_pending(client, run_id)
            for later in order[position + 1 :][:2]:
                state = await ops.status(client, later)
                assert state.status.value == "queued"
            await ops.approve(client, run_id, by="maria", role="approver")
            await wait_status(client, run_id, "completed")
    description = await client.get_workflow_handle(admission_id(tenant)).describe()
    info = description.raw_description.workflow_execution_info
    assert info.first_run_id != description.run_id, "the queue continued as new"
    admitted = await rows(
        pool,
        "SELECT run_id FROM tenant_queue WHERE tenant = %s ORDER BY admitted_at, seq",
        tenant,
    )
    assert [r["run_id"] for r in admitted] == order


async def test_raising_the_cap_admits_waiting_runs_at_once(client, settings, pool, worker):
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    await TenantStore(pool).save(capped(tenant, 1))
    limits = await TenantStore(pool).limits(tenant)
    specs = [make_spec(TASK, tenant=tenant, allowed_tools=["send_message"]) for _ in range(3)]
    async with worker():
        run_ids = [
            (await ops.start_run(client, s, task_queue=settings.task_queue, limits=limits)).run_id
            for s in specs
        ]
        await wait_pending(client, run_ids[0])
        assert (await ops.status(client, run_ids[2])).queue_position == 2
        await tenant_ops.set_tenant(
            client, pool, tenant, {"max_in_flight": 3}, task_queue=settings.task_queue
        )
        for run_id in run_ids[1:]:
            await wait_pending(client, run_id)
        for run_id in run_ids:
            await ops.approve(client, run_id, by="maria", role="approver")
            await wait_status(client, run_id, "completed")


async def test_a_slot_given_before_the_run_first_ran_is_on_record(client, settings, pool, worker):
    """The queue's admit can reach a run before its first workflow task (a busy worker):
    the run starts admitted, and its events still say when."""
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    run_id = f"run-{uuid.uuid4().hex[:12]}"
    spec = make_spec(TASK, tenant=tenant, allowed_tools=["send_message"])
    spec = for_new_run(RunInput.of(spec, admission=admission_id(tenant)))
    handle = await client.start_workflow(
        AgentRunWorkflow.run, spec, id=run_id, task_queue=settings.task_queue
    )
    # No worker yet: the admit lands in the same first task as the start.
    await handle.signal(SIGNAL_RUN_ADMIT, AdmitInput(admission_id=admission_id(tenant)))
    async with worker():
        await wait_pending(client, run_id)
        await ops.approve(client, run_id, by="maria", role="approver")
        assert (await handle.result()).status.value == "completed"
    events = await rows(
        pool,
        "SELECT type FROM events WHERE run_id = %s AND type IN ('run.admitted', 'run.finished')",
        run_id,
    )
    assert sorted(e["type"] for e in events) == ["run.admitted", "run.finished"]


async def test_a_terminated_run_frees_its_slot(client, settings, pool, worker):
    """A terminate runs none of the run's code, so it never says it left: the queue asks
    Temporal while runs wait behind the cap, and frees the slot."""
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    limits = capped(tenant, 1)
    await client.start_workflow(
        TenantAdmissionWorkflow.run,
        AdmissionInput(tenant=tenant, limits=limits, sweep_seconds=1),
        id=admission_id(tenant),
        task_queue=settings.task_queue,
    )
    first, second = (make_spec(TASK, tenant=tenant, allowed_tools=["send_message"]) for _ in "ab")
    async with worker():
        a = await ops.start_run(client, first, task_queue=settings.task_queue, limits=limits)
        await wait_pending(client, a.run_id)
        b = await ops.start_run(client, second, task_queue=settings.task_queue, limits=limits)
        assert b.queue_position == 1
        await client.get_workflow_handle(a.run_id).terminate("operator: stuck")
        await wait_pending(client, b.run_id)  # admitted: the slot came back
        await ops.approve(client, b.run_id, by="maria", role="approver")
        await wait_status(client, b.run_id, "completed")

        async def released():
            found = await rows(pool, "SELECT state FROM tenant_queue WHERE run_id = %s", a.run_id)
            return found == [{"state": "released"}]

        await eventually(released, what="the terminated run's queue row to say released")
