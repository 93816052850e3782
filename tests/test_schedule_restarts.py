"""A schedule's fires through a worker SIGKILL and a Temporal restart (docs/triggers.md).

On the embedded stack (`agentledger up`'s: a dev server on a SQLite file, Postgres, the
offline model) with a real worker process: a schedule fires every two seconds; its worker is
killed (SIGKILL) with fires in flight and replaced after fires came due with no worker; then
the dev server stops and starts again on its file. Every fire time Temporal made is one run,
started once (one execution of its id), under its tenant's policy (its fairness key and
weight) and charged to the schedule; the mirror's row for each fire names that run.
"""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections import Counter
from datetime import datetime

import pytest
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client, WorkflowExecutionStatus

from agentledger import RunClient
from agentledger.core.schedule_models import fire_run_id
from agentledger.workflows.scheduled_fires import SCHEDULED_AT
from bench.harness import WorkerProcess
from chaos.lab import Lab
from tests.support import eventually, rows

LOOK_UP = "Look up our refund policy."


async def ended_fires(pool: AsyncConnectionPool, tenant: str, at_least: int) -> int:
    async def enough() -> int | None:
        found = await rows(
            pool,
            "SELECT count(*) AS n FROM schedule_fires WHERE tenant = %s AND outcome = 'ended'",
            tenant,
        )
        return found[0]["n"] if found[0]["n"] >= at_least else None

    return await eventually(enough, seconds=90, what=f"{at_least} fires' runs ended")


async def fires_in_temporal(client: Client, tenant: str) -> dict[str, datetime]:
    """Each fire workflow the schedule started, by its id, with the time it fired for."""
    fires = {}
    async for each in client.list_workflows(f"WorkflowId STARTS_WITH 'fire-{tenant}~tick'"):
        described = await client.get_workflow_handle(each.id, run_id=each.run_id).describe()
        fired_at = described.typed_search_attributes.get(SCHEDULED_AT)
        assert fired_at is not None, each.id
        assert each.id not in fires, f"{each.id} started twice"
        fires[each.id] = fired_at
    return fires


async def replaced(lab: Lab, queue: str, old: WorkerProcess | None) -> WorkerProcess:
    if old is not None and old.proc is not None and old.proc.returncode is None:
        old.proc.send_signal(signal.SIGKILL)
        await old.proc.wait()
    return await lab.worker(queue).start(ready_line="polling")


@pytest.mark.timeout(420)
async def test_each_fire_time_is_one_run_through_a_worker_sigkill_and_a_temporal_restart(
    tmp_path,
):
    lab = await Lab(tmp_path / "lab").start()
    queue = f"fires-{uuid.uuid4().hex[:8]}"
    tenant = f"tick-{uuid.uuid4().hex[:8]}"
    settings = lab.settings.model_copy(update={"task_queue": queue})
    try:
        async with RunClient(lab.client, settings) as operator:
            await operator.tenants.set(tenant, {"weight": 2.0})
            ours = operator.acting_for(tenant)
            worker = await replaced(lab, queue, None)
            await ours.schedules.create("tick", task=LOOK_UP, every=2, overlap="allow_all")
            seen = await ended_fires(lab.pool, tenant, 2)
            # Killed with a fire's run in flight; fires come due while no worker runs.
            worker.proc.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
            await asyncio.sleep(5)
            worker = await replaced(lab, queue, worker)
            seen = await ended_fires(lab.pool, tenant, seen + 2)
            # The server stops with fires open and comes back on its database file.
            await asyncio.to_thread(lab.stack.stop_temporal)
            await asyncio.sleep(3)
            await asyncio.to_thread(lab.stack.start_temporal)
            if worker.proc is not None and worker.proc.returncode is not None:
                worker = await replaced(lab, queue, worker)  # a worker that gave up
            await ended_fires(lab.pool, tenant, seen + 2)
            await ours.schedules.pause("tick")

            async def all_fires_over() -> dict[str, datetime] | None:
                fires = await fires_in_temporal(lab.client, tenant)
                handles = [lab.client.get_workflow_handle(f) for f in fires]
                states = [(await h.describe()).status for h in handles]
                open_ = [s for s in states if s == WorkflowExecutionStatus.RUNNING]
                return fires if not open_ else None

            fires = await eventually(all_fires_over, seconds=90, what="every fire over")

            # One run per fire time: one execution of each run's id, and no run without a fire.
            listed = lab.client.list_workflows(
                f"WorkflowId STARTS_WITH 'run-~schedule.{tenant}~tick@'"
            )
            executions = Counter([each.id async for each in listed])
            expected = {fire_run_id(tenant, "tick", at) for at in fires.values()}
            assert len(expected) == len(fires) >= 6
            assert set(executions) == expected, (executions, expected)
            assert set(executions.values()) == {1}, executions
            mirrored = await rows(
                lab.pool,
                "SELECT fired_at, run_id, outcome FROM schedule_fires WHERE tenant = %s",
                tenant,
            )
            assert len(mirrored) == len(fires)
            assert {r["run_id"] for r in mirrored} == expected
            assert all(r["outcome"] == "ended" for r in mirrored), mirrored
            # Each under its tenant's policy, and charged to the schedule.
            for run_id in expected:
                described = await lab.client.get_workflow_handle(run_id).describe()
                assert described.status == WorkflowExecutionStatus.COMPLETED, run_id
                priority = described.raw_description.workflow_execution_info.priority
                assert priority.fairness_key == tenant and priority.fairness_weight == 2.0
                receipt = await ours.runs.receipt(run_id)
                assert receipt.charged_to == "schedule:tick" and receipt.tenant == tenant
            await ours.schedules.delete("tick")
        await worker.stop()
    finally:
        await lab.stop()
