"""Schedules (issue 50) on Temporal Schedules, on the real stack.

A schedule firing every second starts one run per fire time, each under its tenant's
policy (its approvers, its weight) and charged to the schedule; the run's receipt and the
mirror name the schedule. `--overlap skip` skips fires while a run waits for a person, and
`schedule show` says so. A tenant over an enforcing budget gets no run from a fire: the fire
records why. Another tenant's schedule reads as missing; a runner may make one only where
the tenant's policy says so. Pause, resume, trigger and delete do what they say.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import pytest
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from agentledger import RunClient
from agentledger.client import approver_keys
from agentledger.core._state import RunInput
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.errors import OperationRefused, RunNotFound
from agentledger.core.schedule_models import fire_run_id
from agentledger.store.approver_store import ApproverStore
from tests.support import eventually, rows

LOOK_UP = "Look up our refund policy."
NOTIFY = "Look up our refund policy and notify ana@example.com about it."


@pytest.fixture
async def tenant(client: Client, settings: AgentLedgerConfig):
    name = f"sched-{uuid.uuid4().hex[:8]}"
    async with RunClient(client, settings) as operator:
        yield operator, operator.acting_for(name), name


async def fires_of(pool: AsyncConnectionPool, tenant: str, schedule: str) -> list[dict]:
    return await rows(
        pool,
        "SELECT fired_at, run_id, outcome, reason FROM schedule_fires "
        "WHERE tenant = %s AND schedule = %s ORDER BY fired_at",
        tenant,
        schedule,
    )


async def test_every_fire_time_is_one_run_under_the_tenants_policy(tenant, pool, worker):
    operator, ours, name = tenant
    await operator.tenants.set(name, {"weight": 2.0})
    async with worker():
        made = await ours.schedules.create("tick", task=LOOK_UP, every=1, overlap="allow_all")
        assert made.tenant == name and made.every_seconds == 1 and not made.paused

        async def ended_twice() -> list[dict] | None:
            fires = await fires_of(pool, name, "tick")
            return fires if sum(f["outcome"] == "ended" for f in fires) >= 2 else None

        await eventually(ended_twice, seconds=60, what="two fires' runs ended")
        await ours.schedules.pause("tick")
        fires = [f for f in await fires_of(pool, name, "tick") if f["outcome"] == "ended"]
        # Each fire time is its own run, named by it; each ran to its end.
        assert len({f["run_id"] for f in fires}) == len({f["fired_at"] for f in fires})
        for fire in fires:
            assert fire["run_id"] == fire_run_id(name, "tick", fire["fired_at"])
            assert fire["reason"] == "the run ended completed"
        receipt = await ours.runs.receipt(fires[0]["run_id"])
        assert receipt.tenant == name and receipt.charged_to == "schedule:tick"
        assert receipt.trigger is not None and receipt.trigger.name == "tick"
        assert receipt.trigger.fired_at == fires[0]["fired_at"]
        # Its tenant's weight reached it, as every start's.
        run = await ours.runs.status(fires[0]["run_id"])
        assert run.tenant == name
        listed = await ours.schedules.listed()
        assert [(s.name, s.paused, s.when) for s in listed] == [("tick", True, "every 1s")]
        shown = await ours.schedules.show("tick")
        assert shown.fires >= 2 and shown.paused and "paused" in shown.text()
        await ours.schedules.delete("tick")
        with pytest.raises(RunNotFound, match="no schedule 'tick'"):
            await ours.schedules.show("tick")


async def test_overlap_skip_skips_fires_while_a_run_is_busy_and_says_so(
    tenant, client, pool, worker
):
    _, ours, name = tenant
    async with worker():
        await ours.schedules.create("notify", task=NOTIFY, every=1, overlap="skip")

        async def waiting() -> str | None:
            fires = await fires_of(pool, name, "notify")
            if not fires:
                return None
            try:
                state = await ours.runs.status(fires[0]["run_id"])
            except RunNotFound:  # the fire records its run's id just before it starts it
                return None
            return fires[0]["run_id"] if state.pending_approval else None

        first = await eventually(waiting, seconds=60, what="the first run at its approval")
        await asyncio.sleep(3)  # three fire times pass while it waits for a person
        shown = await ours.schedules.show("notify")
        assert shown.skipped_busy >= 2, shown
        assert "while a run was busy" in shown.text()
        assert [f["run_id"] for f in await fires_of(pool, name, "notify")] == [first]
        await ours.schedules.delete("notify")
        await ours.runs.cancel(first)


async def test_a_fire_over_an_enforcing_budget_starts_nothing_and_records_why(tenant, pool, worker):
    operator, ours, name = tenant
    await operator.tenants.set_budget(name, "day", {"tokens": 1, "mode": "enforcing"})
    async with pool.connection() as conn:  # the tenant spent it already today
        await conn.execute(
            "INSERT INTO model_journal (run_id, step_id, attempt, model, response, tokens_in,"
            " tokens_out, cost_usd, tenant) VALUES (%s, 's', 1, 'm', '{}', 5, 5, 0, %s)",
            (f"run-{name}-earlier", name),
        )
    async with worker():
        await ours.schedules.create("spender", task=LOOK_UP, every=3600, paused=True)
        await ours.schedules.trigger("spender")

        async def skipped() -> list[dict] | None:
            fires = await fires_of(pool, name, "spender")
            return fires if fires and fires[0]["outcome"] == "skipped" else None

        [fire] = await eventually(skipped, what="the fire skipped")
    assert fire["run_id"] is None and "budget" in fire["reason"] and "resets at" in fire["reason"]
    shown = await ours.schedules.show("spender")
    assert "skipped" in shown.text() and "budget" in shown.text()


async def test_schedules_are_their_tenants_and_their_policys(tenant, client, settings):
    operator, ours, name = tenant
    await ours.schedules.create("mine", task=LOOK_UP, cron="0 9 * * MON", paused=True)
    other = operator.acting_for(f"other-{uuid.uuid4().hex[:6]}")
    with pytest.raises(RunNotFound, match="no schedule 'mine'"):
        await other.schedules.show("mine")
    with pytest.raises(RunNotFound, match="no schedule 'mine'"):
        await other.schedules.delete("mine")
    assert await other.schedules.listed() == []
    shown = await ours.schedules.show("mine")
    assert shown.cron == "0 9 * * MON" and shown.next_fires
    assert shown.next_fires[0] > datetime.now(UTC) and shown.next_fires[0].weekday() == 0
    with pytest.raises(OperationRefused, match="exists already"):
        await ours.schedules.create("mine", task=LOOK_UP, every=60)
    # A runner makes schedules only where the tenant's policy lets runners.
    from agentledger.core.access import Caller
    from agentledger.core.identity import Identity

    runner = Caller(
        tenant=name,
        roles=frozenset({"runner"}),
        identity=Identity.of_key("r", None),
        credential="key:r",
    )
    as_runner = operator.acting_as(runner)
    with pytest.raises(OperationRefused, match="--schedule-role runner"):
        await as_runner.schedules.create("theirs", task=LOOK_UP, every=60, paused=True)
    await operator.tenants.set(name, {"schedule_role": "runner"})
    made = await as_runner.schedules.create("theirs", task=LOOK_UP, every=60, paused=True)
    assert made.name == "theirs"
    assert {s.name for s in await operator.schedules.listed(name)} == {"mine", "theirs"}
    for each in ("mine", "theirs"):
        await ours.schedules.delete(each)


async def test_a_fire_carries_its_tenants_approvers(tenant, client, pool, worker, tmp_path):
    """The tenant's keyed approvers reach each fire's run, read when it fires."""
    _, ours, name = tenant
    async with worker():
        await ours.schedules.create("signed", task=LOOK_UP, every=3600, paused=True)
        key = approver_keys.create(tmp_path, "li", "approver", name)
        await ApproverStore(pool).add(key.signer)  # registered after the schedule was made
        await ours.schedules.trigger("signed")

        async def started() -> str | None:
            fires = await fires_of(pool, name, "signed")
            return fires[0]["run_id"] if fires and fires[0]["run_id"] else None

        run_id = await eventually(started, what="the fire's run")
        history = await client.get_workflow_handle(run_id).fetch_history()
    payloads = history.events[0].workflow_execution_started_event_attributes.input.payloads
    [spec] = await client.data_converter.decode(payloads, [RunInput])
    assert key.signer.key_id in [s.key_id for s in spec.approval.signers]
    assert spec.tenant == name and spec.trigger is not None
    await ours.schedules.delete("signed")
