"""A sub-agent's run under its tenant's policy, and decisions answered as the run recorded
them, on the real stack.

A tenant with a keyed approver, a cap of one and a weight of 3 starts a parent that delegates
to a sub-agent whose message waits for approval: the child's run carries the tenant's
approver (an unsigned "mallory" is refused), runs at the tenant's fairness key and weight, and
runs in its parent's slot (it is not queued behind its own parent, and the tenant's next run
waits). A decision on a child's run answers what the run recorded ("approved", "rejected"),
never "abandoned" as it did when the parent was told before the decision was recorded; so
does one on a plain run, a session and a fork.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from pathlib import Path

import pytest

from agentledger import RunClient
from agentledger.client import approver_keys
from agentledger.core.admission_models import TenantLimits
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.errors import OperationError, OperationRefused
from agentledger.dev.offline_model import OfflineModelServer
from agentledger.profiles import Agent
from agentledger.store.approver_store import ApproverStore
from agentledger.store.tenant_store import TenantStore
from agentledger.workflows import AgentRunWorkflow
from tests import client_ops as fork_ops
from tests import client_ops as ops
from tests.support import NOTIFY_TASK, eventually, make_spec, wait_pending, wait_status
from tests.test_door import cli
from tests.test_subagents import AGENTS, LEAD, approving_child_model, parent_spec

SENDER = {**AGENTS, "alpha": Agent(name="alpha", instructions="A.", tools=["send_message"])}


async def _child_waiting(client, run_id: str) -> str:
    """The id of the sub-agent run that waits for an approval under `run_id`."""

    async def waiting() -> str | None:
        shown = (await ops.status(client, run_id)).child_approvals
        return shown[0].run_id if shown else None

    return await eventually(waiting, seconds=60, what="the child's approval in its parent")


async def test_a_subagents_run_carries_its_tenants_approvers_cap_and_weight(
    client, settings: AgentLedgerConfig, pool, worker, tmp_path: Path
):
    acme = f"acme-{uuid.uuid4().hex[:8]}"
    ana = approver_keys.create(tmp_path, "ana", "approver", acme)
    assert await ApproverStore(pool).add(ana.signer)
    await TenantStore(pool).save(TenantLimits(tenant=acme, max_in_flight=1, weight=3))
    run_client = RunClient(client, settings.model_copy(update={"tenant": acme}))
    spec = parent_spec(tenant=acme, subagents=LEAD.spec_fields(SENDER)["subagents"])
    try:
        with OfflineModelServer(approving_child_model(slow_seconds=0)) as model:
            async with worker(base_url=model.base_url):
                parent = (await run_client.runs.start(spec=spec)).run_id
                child = await _child_waiting(client, parent)

                # The tenant's policy, carried by the child's run.
                carried = (await fork_ops.parent_input(client, child)).approval.signers
                assert ana.signer.key_id in {s.key_id for s in carried}
                described = await client.get_workflow_handle(child).describe()
                priority = described.raw_description.workflow_execution_info.priority
                assert (priority.fairness_key, priority.fairness_weight) == (acme, 3)
                # In its parent's slot: not queued behind it, and the tenant's next run waits.
                state = await ops.status(client, child)
                assert state.tenant == acme and state.status.value == "waiting_for_approval"
                assert state.admission is None
                queued = (await run_client.runs.start(make_spec().task)).run_id
                await wait_status(client, queued, "queued")

                with pytest.raises(OperationError, match="only signed decisions"):
                    await ops.approve(client, child, by="mallory", role="approver")
                decided = await run_client.runs.approve(child, by="ana", signer=ana)
                assert decided.decision == "approved", decided

                handle = client.get_workflow_handle_for(AgentRunWorkflow.run, parent)
                assert (await handle.result()).status.value == "completed"
                # The slot is free again: the tenant's next run is admitted and goes on.
                await wait_status(client, queued, "completed", seconds=60)
    finally:
        await run_client.close()
    receipt = await ops.receipt(pool, child)
    assert [(a["decision"], a["by"]) for a in receipt["approvals"]] == [("approved", "ana")]


async def test_a_decision_on_a_childs_run_answers_what_it_recorded(
    client, settings: AgentLedgerConfig, pool, worker, tmp_path: Path
):
    """Through the CLI: `reject` of a child's run answers "rejected" (the first test's
    `approve` through `RunClient` answers "approved")."""
    spec = parent_spec(subagents=LEAD.spec_fields(SENDER)["subagents"])
    with OfflineModelServer(approving_child_model(slow_seconds=0)) as model:
        async with worker(base_url=model.base_url):
            run_client = RunClient(client, settings)
            try:
                parent = (await run_client.runs.start(spec=spec)).run_id
            finally:
                await run_client.close()
            child = await _child_waiting(client, parent)
            rejected = await cli(
                settings, tmp_path, None,
                "reject", child, "--by", "li", "--role", "approver", "--reason", "no", "--json",
            )  # fmt: skip
            assert rejected.code == 0, rejected
            assert json.loads(rejected.out)["decision"] == "rejected", rejected.out
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, parent)
            assert (await handle.result()).status.value == "completed"
    receipt = await ops.receipt(pool, child)
    assert [a["decision"] for a in receipt["approvals"]] == ["rejected"]


async def test_a_decision_answers_what_the_run_recorded_on_parents_sessions_and_forks(
    client, settings: AgentLedgerConfig, pool, worker, tmp_path: Path
):
    """The same answer on every other kind of run: `approve` of a plain run and of a
    session through the CLI, `reject` of a fork through `RunClient`."""
    run_client = RunClient(client, settings)
    try:
        async with worker():
            plain = (await run_client.runs.start(NOTIFY_TASK)).run_id
            session = (
                await run_client.runs.start(NOTIFY_TASK, session={"idle_timeout": 60})
            ).run_id
            for run_id in (plain, session):
                await wait_pending(client, run_id)
                approved = await cli(
                    settings, tmp_path, None,
                    "approve", run_id, "--by", "li", "--role", "approver", "--json",
                )  # fmt: skip
                assert approved.code == 0, approved
                assert json.loads(approved.out)["decision"] == "approved", approved.out
            fork = (await run_client.runs.fork(plain, from_step=1)).run_id
            await wait_pending(client, fork)
            rejected = await run_client.runs.reject(
                fork, by="li", role="approver", reason="not now"
            )
            assert rejected.decision == "rejected", rejected
            expected = {plain: "approved", session: "approved", fork: "rejected"}
            for run_id, decision in expected.items():
                recorded = [d.decision for d in (await ops.status(client, run_id)).decided]
                assert recorded == [decision], (run_id, recorded)
                with contextlib.suppress(OperationRefused):  # one that went on to its end
                    await ops.cancel(client, run_id)
    finally:
        await run_client.close()
