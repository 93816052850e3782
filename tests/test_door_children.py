"""The door for runs a workflow starts itself: a backlog's tasks and the agent a
deployment's own workflow runs (`run_agent`) take their tenant's policy as Postgres holds it
when they start: its approvers and weight, its cap (they wait in the tenant's queue), and the
priorities it allows (a start at another is refused on every path). A backlog refuses, by
itself, a stop or resume sent for one tenant while it holds another's tasks, even one whose
enqueue the server held and the mirror never showed."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowFailureError

from activities import for_worker
from agentledger import RunClient
from agentledger.client import approver_keys
from agentledger.core.admission_models import TenantLimits
from agentledger.core.backlog_models import PolicyPatch
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.errors import OperationError, OperationRefused
from agentledger.store.approver_store import ApproverStore
from agentledger.store.tenant_store import TenantStore
from agentledger.workflows.admission import admission_id
from agentledger.workflows.child_runs import child_run_id
from tests import client_ops as backlog_ops
from tests import client_ops as fork_ops
from tests import client_ops as ops
from tests.backlog_support import end_backlog, item, new_agent, wait_states
from tests.support import eventually, make_spec, rows, wait_pending
from tests.test_door import cli
from workflows import WORKFLOWS, RefundRequest, RefundReviewWorkflow


@pytest.fixture
def tenants() -> tuple[str, str]:
    mark = uuid.uuid4().hex[:8]
    return f"acme-{mark}", f"globex-{mark}"


async def status_of(client: Client, run_id: str) -> str | None:
    try:
        return (await ops.status(client, run_id)).status.value
    except OperationError:
        return None  # not started yet


async def children(pool: Any, agent: str) -> dict[str, str]:
    found = await rows(
        pool,
        "SELECT task_key, run_id FROM backlog_tasks WHERE agent = %s AND run_id IS NOT NULL",
        agent,
    )
    return {r["task_key"]: r["run_id"] for r in found}


async def test_a_capped_tenants_backlog_runs_wait_in_its_queue(
    client, settings: AgentLedgerConfig, pool, worker, tenants
):
    """A tenant with a cap of one enqueues two tasks into a backlog that runs two at once:
    one run is past `queued` at a time, the other waits in the tenant's queue (it was refused
    outright before), and is admitted when the first ends."""
    acme, _ = tenants
    await TenantStore(pool).save(TenantLimits(tenant=acme, max_in_flight=1, weight=2))
    agent = new_agent("capped")
    # An operator's: a backlog's parallelism bounds every tenant's tasks in it.
    run_client = RunClient(client, settings.model_copy(update={"tenant": None}))
    notify = make_spec().task  # waits for a person before its message goes out
    try:
        async with worker():
            await run_client.backlogs.enqueue(
                agent,
                [
                    item("n-1", notify, allowed_tools=None, tenant=acme),
                    item("n-2", notify, allowed_tools=None, tenant=acme),
                ],
                policy=PolicyPatch(parallelism=2),
            )

            async def both() -> dict[str, str] | None:
                found = await children(pool, agent)
                if len(found) < 2:
                    return None
                states = {k: await status_of(client, r) for k, r in found.items()}
                return states if None not in states.values() else None

            states = await eventually(both, what="both tasks' runs to start")
            ids = await children(pool, agent)
            first = next(k for k, s in states.items() if s != "queued")
            second = next(k for k in ids if k != first)
            await wait_pending(client, ids[first])
            assert await status_of(client, ids[second]) == "queued", "never past the cap"
            for key in ids:
                state = await ops.status(client, ids[key])
                assert state.admission == admission_id(acme)
                described = await client.get_workflow_handle(ids[key]).describe()
                priority = described.raw_description.workflow_execution_info.priority
                assert (priority.fairness_key, priority.fairness_weight) == (acme, 2)
            queue = await rows(
                pool, "SELECT run_id, state FROM tenant_queue WHERE tenant = %s", acme
            )
            assert {r["run_id"]: r["state"] for r in queue} == {
                ids[first]: "admitted",
                ids[second]: "waiting",
            }
            await ops.approve(client, ids[first], by="maria", role="approver")
            await wait_pending(client, ids[second])
            await ops.approve(client, ids[second], by="maria", role="approver")
            await wait_states(pool, agent, {"n-1": "done", "n-2": "done"}, seconds=120)
    finally:
        await run_client.close()
        await end_backlog(client, agent)


async def test_a_tenants_allowed_priorities_hold_on_every_path(
    client, settings: AgentLedgerConfig, pool, worker, tenants, tmp_path
):
    """An operator allows tenant acme priorities 2 and 3 (`tenants set --priorities`); a start
    at priority 1 is refused, exit 5, through the CLI, `client.runs.start`, a fork, a backlog
    enqueue, a backlog's own start of a task and `run_agent`; at priority 3 each goes on. The
    operator sets them through the CLI or `client.tenants.set`; a tenant cannot."""
    acme, _ = tenants
    by_operator = await cli(
        settings, tmp_path, None, "tenants", "set", acme, "--priorities", "3,2", "--json"
    )
    assert by_operator.code == 0, by_operator.err
    assert json.loads(by_operator.out)["allowed_priorities"] == [2, 3]
    assert (await TenantStore(pool).limits(acme)).allowed_priorities == [2, 3]
    by_tenant = await cli(settings, tmp_path, acme, "tenants", "set", acme, "--priorities", "1")
    assert by_tenant.code == 5, "a tenant does not set its own priorities"
    refused = await cli(
        settings, tmp_path, acme, "start", "--task", "Look up the order policy.",
        "--priority", "1", "--json",
    )  # fmt: skip
    assert refused.code == 5 and refused.out == "", refused
    assert "may start runs at priority 2, 3 only, not 1" in refused.err, refused.err

    run_client = RunClient(client, settings.model_copy(update={"tenant": acme}))
    agent = new_agent("prio")
    ledger = tmp_path / "refunds.jsonl"
    try:
        with pytest.raises(OperationRefused, match="priority 2, 3 only"):
            await run_client.runs.start(make_spec().task, priority=1)
        with pytest.raises(OperationRefused, match="priority 2, 3 only"):
            await run_client.backlogs.enqueue(agent, [item("p-1", priority=1)])
        async with worker(workflows=tuple(WORKFLOWS), activities=tuple(for_worker(ledger))):
            allowed = (await run_client.runs.start(make_spec().task, priority=3)).run_id
            await wait_pending(client, allowed)
            operator = RunClient(client, settings)
            try:
                changed = await operator.tenants.set(acme, {"allowed_priorities": [2]})
            finally:
                await operator.close()
            assert changed.allowed_priorities == [2]
            with pytest.raises(OperationRefused, match="priority 2 only, not 3"):
                await run_client.runs.fork(allowed, from_step=1)

            # A task enqueued past the door (as a backlog recorded before the check holds
            # one) is refused when the backlog starts its run: it fails at once, unstarted.
            await backlog_ops.enqueue(
                client, agent, [item("p-1", tenant=acme, priority=1)],
                task_queue=settings.task_queue,
            )  # fmt: skip
            await wait_states(pool, agent, {"p-1": "failed"}, seconds=60)
            dead = await run_client.backlogs.dead(agent)
            assert "may start runs at priority 2 only, not 1" in dead[0].last_error
            assert await children(pool, agent) == {}, "no run was started"

            parent = f"refund-{uuid.uuid4().hex[:8]}"
            request = RefundRequest(
                request_id="r-1",
                customer="ana@example.com",
                amount_usd=1.0,
                agent=make_spec(tenant=acme, priority=1),
            )
            handle = await client.start_workflow(
                RefundReviewWorkflow.run, request, id=parent, task_queue=settings.task_queue
            )
            with pytest.raises(WorkflowFailureError) as failed:
                await handle.result()
            cause: Any = failed.value.cause
            assert cause.type == "OperationRefused" and "priority 2 only" in cause.message
            assert await status_of(client, child_run_id(parent, "r-1")) is None
            await ops.cancel(client, allowed)
    finally:
        await run_client.close()
        await end_backlog(client, agent)


async def test_an_agent_in_your_own_workflow_takes_its_tenants_policy(
    client, settings: AgentLedgerConfig, pool, worker, tenants, tmp_path: Path
):
    """`run_agent` from a deployment's workflow: the agent's run carries its tenant's keyed
    approver (an unsigned "mallory" cannot approve it) and weight, and waits behind the
    tenant's cap of one until the run holding the slot ends."""
    acme, _ = tenants
    ana = approver_keys.create(tmp_path, "ana", "approver", acme)
    assert await ApproverStore(pool).add(ana.signer)
    await TenantStore(pool).save(TenantLimits(tenant=acme, max_in_flight=1, weight=3))
    run_client = RunClient(client, settings.model_copy(update={"tenant": acme}))
    ledger = tmp_path / "refunds.jsonl"
    parent = f"refund-{uuid.uuid4().hex[:8]}"
    try:
        async with worker(workflows=tuple(WORKFLOWS), activities=tuple(for_worker(ledger))):
            holder = (await run_client.runs.start(make_spec().task)).run_id
            await wait_pending(client, holder)
            request = RefundRequest(
                request_id="r-1",
                customer="ana@example.com",
                amount_usd=1.0,
                agent=make_spec(tenant=acme),
            )
            handle = await client.start_workflow(
                RefundReviewWorkflow.run, request, id=parent, task_queue=settings.task_queue
            )
            agent_run = child_run_id(parent, "r-1")

            async def queued() -> bool:
                return await status_of(client, agent_run) == "queued"

            await eventually(queued, what="the agent's run to wait behind the cap")
            state = await ops.status(client, agent_run)
            assert state.admission == admission_id(acme) and state.tenant == acme
            carried = (await fork_ops.parent_input(client, agent_run)).approval.signers
            assert ana.signer.key_id in {s.key_id for s in carried}
            described = await client.get_workflow_handle(agent_run).describe()
            priority = described.raw_description.workflow_execution_info.priority
            assert (priority.fairness_key, priority.fairness_weight) == (acme, 3)

            await ops.cancel(client, holder)
            await wait_pending(client, agent_run)
            with pytest.raises(OperationError, match="only signed decisions"):
                await ops.approve(client, agent_run, by="mallory", role="approver")
            await handle.cancel()
    finally:
        await run_client.close()


async def test_a_held_stop_of_one_tenant_stops_its_own_tasks_alone(
    client, settings: AgentLedgerConfig, pool, worker, tenants
):
    """With no worker, globex's enqueue is held by the server, unseen by the mirror; then
    acme's stop is held too. The next worker applies both in order: acme's stop acts on
    acme's tasks alone, the backlog is not stopped, and globex's task runs."""
    acme, globex = tenants
    agent = new_agent("held")
    as_acme = RunClient(client, settings.model_copy(update={"tenant": acme}))
    as_globex = RunClient(client, settings.model_copy(update={"tenant": globex}))
    try:
        async with worker():
            await as_acme.backlogs.enqueue(agent, [item("a-1")])
            await wait_states(pool, agent, {"a-1": "done"}, seconds=60)
        held = await as_globex.backlogs.enqueue(agent, [item("g-1")], wait=2)
        assert held.held == ["g-1"], held
        stopped = await as_acme.backlogs.stop(agent, wait=2)
        assert stopped.message.startswith("held:"), stopped
        async with worker():
            await wait_states(pool, agent, {"a-1": "done", "g-1": "done"}, seconds=60)
            state = await backlog_ops.state(client, agent)
            assert not state.stopped, "acme's stop acted on globex's task"
    finally:
        await as_acme.close()
        await as_globex.close()
        await end_backlog(client, agent)
