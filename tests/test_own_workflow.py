"""An agent inside a deployment's own workflow (workflows/refund_review.py): the business
workflow runs the support-desk agent as a child, the agent's message waits for a person, and
only once the agent's run completed is the refund recorded, once, by the deployment's own
activity. The parent's history replays against today's code, as does the committed one."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHistory
from temporalio.service import RPCError

import agentledger
from activities import for_worker
from agentledger.core.constants import RUN_ID_PREFIX
from agentledger.workflows import AgentRunWorkflow
from agentledger.workflows.child_runs import child_run_id
from tests import client_ops as ops
from tests.recorded import replayer
from tests.support import eventually, make_spec, rows, wait_pending
from workflows import WORKFLOWS, RefundRequest, RefundReviewWorkflow


async def started(client: Client, run_id: str) -> bool:
    try:
        await client.get_workflow_handle(run_id).describe()
    except RPCError:
        return False
    return True


ROOT = Path(__file__).resolve().parent.parent
HISTORY = Path(__file__).parent / "histories" / "own_workflow" / "refund_review.json"
# The committed history's workflow id: the agent's run id derives from it, so a replay needs
# it. `AGENTLEDGER_RECORD_HISTORIES=1 pytest tests/test_own_workflow.py` records it again, after
# an intended change to workflows/refund_review.py or run_agent (keep the old file under
# another name beside it: open runs need it).
RECORDED_ID = "refund-recorded"
RECORDING = os.environ.get("AGENTLEDGER_RECORD_HISTORIES") == "1"


async def test_a_business_workflow_runs_an_agent_and_acts_once(
    client: Client, settings, pool, worker, tmp_path
):
    ledger = tmp_path / "refunds.jsonl"
    request = RefundRequest(
        request_id="r-1",
        customer="ana@example.com",
        amount_usd=42.0,
        agent=make_spec(),
    )
    parent_id = RECORDED_ID if RECORDING else f"refund-{request.agent.idempotency_key}"
    async with worker(workflows=tuple(WORKFLOWS), activities=tuple(for_worker(ledger))):
        handle = await client.start_workflow(
            RefundReviewWorkflow.run, request, id=parent_id, task_queue=settings.task_queue
        )
        agent_run = child_run_id(parent_id, request.request_id)
        assert agent_run.startswith(RUN_ID_PREFIX) and "~" in agent_run
        await eventually(
            lambda: started(client, agent_run), what="the parent to start the agent's run"
        )
        pending = await wait_pending(client, agent_run)
        assert pending.tool == "send_message"
        assert not ledger.exists(), "nothing is refunded before the agent's answer"
        await ops.approve(client, agent_run, by="maria", role="approver")
        outcome = await handle.result()
        history = await handle.fetch_history()

    assert outcome.agent_run_id == agent_run and outcome.agent_status == "completed"
    assert outcome.agent_answer and outcome.agent_answer.startswith("## Summary")
    assert outcome.refund is not None and outcome.refund.recorded_by == parent_id
    lines = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [line["request_id"] for line in lines] == ["r-1"]

    # The agent's run is an agentledger run like any other: mirrored, with a receipt.
    run = await rows(pool, "SELECT status FROM runs WHERE run_id = %s", agent_run)
    assert run == [{"status": "completed"}]
    receipt = await ops.receipt(pool, agent_run)
    assert receipt["outcome"] == "completed"

    # The parent's history replays against today's code, beside the engine's workflows.
    await replayer([RefundReviewWorkflow, AgentRunWorkflow]).replay_workflow(history)
    if RECORDING:
        HISTORY.parent.mkdir(parents=True, exist_ok=True)
        HISTORY.write_text(history.to_json())


@pytest.mark.parametrize("path", sorted(HISTORY.parent.glob("*.json")), ids=lambda path: path.stem)
async def test_the_committed_business_histories_replay(path: Path):
    """The recordings of today's paths (a parent recorded before `run_agent` read its
    tenant's policy is in the archive, tests/test_version_branches.py)."""
    history = WorkflowHistory.from_json(RECORDED_ID, await asyncio.to_thread(path.read_text))
    await replayer([RefundReviewWorkflow, AgentRunWorkflow]).replay_workflow(history)


async def test_a_business_workflow_gets_the_result_of_an_agent_run_that_was_rejected(
    client: Client, settings, pool, worker, tmp_path
):
    """The rejected agent's run ends Canceled in Temporal, as agentledger says; `run_agent`
    still returns its result (cancelled, with the reason) to the business workflow."""
    ledger = tmp_path / "refunds.jsonl"
    request = RefundRequest(
        request_id="r-2", customer="bo@example.com", amount_usd=7.0, agent=make_spec()
    )
    parent_id = f"refund-{request.agent.idempotency_key}"
    async with worker(workflows=tuple(WORKFLOWS), activities=tuple(for_worker(ledger))):
        handle = await client.start_workflow(
            RefundReviewWorkflow.run, request, id=parent_id, task_queue=settings.task_queue
        )
        agent_run = child_run_id(parent_id, request.request_id)
        await eventually(
            lambda: started(client, agent_run), what="the parent to start the agent's run"
        )
        await wait_pending(client, agent_run)
        await ops.reject(client, agent_run, by="maria", role="approver", reason="not this one")
        outcome = await asyncio.wait_for(handle.result(), 60)
        described = await client.get_workflow_handle(agent_run).describe()

    assert outcome.agent_status == "cancelled" and outcome.refund is None
    assert described.status == WorkflowExecutionStatus.CANCELED
    assert (await ops.receipt(pool, agent_run))["outcome"] == "cancelled"
    assert not ledger.exists()


async def test_the_deployments_worker_py_serves_its_workflow_through_the_plugin(
    client: Client, settings, pool, tmp_path
):
    """`python worker.py`, the deployment's own Client and Worker with AgentLedgerPlugin, runs
    the refund review; the agent's approval goes through `RunClient.connect` (a Client with
    the plugin, then `RunClient.on`), where another tenant's client finds no such run."""
    acme, globex = (f"{name}-{uuid.uuid4().hex[:8]}" for name in ("acme", "globex"))
    ledger = tmp_path / "refunds.jsonl"
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": settings.temporal_address,
        "DATABASE_URL": settings.database_url,
        "OPENAI_BASE_URL": settings.openai_base_url,
        "AGENTLEDGER_TASK_QUEUE": settings.task_queue,
        "REFUND_LEDGER": str(ledger),
    }
    log = (tmp_path / "worker.log").open("w")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "worker.py", "--demo", cwd=ROOT, env=env, stdout=log, stderr=log
    )
    request = RefundRequest(
        request_id="r-3", customer="cy@example.com", amount_usd=3.0, agent=make_spec(tenant=acme)
    )
    parent_id = f"refund-{request.agent.idempotency_key}"
    agent_run = child_run_id(parent_id, request.request_id)
    try:
        handle = await client.start_workflow(
            RefundReviewWorkflow.run, request, id=parent_id, task_queue=settings.task_queue
        )
        await eventually(
            lambda: started(client, agent_run), seconds=60, what="worker.py to start the agent"
        )
        pending = await wait_pending(client, agent_run)
        assert pending.tool == "send_message"
        foreign = await agentledger.RunClient.connect(
            settings.model_copy(update={"tenant": globex})
        )
        async with foreign:
            with pytest.raises(agentledger.NotFound):
                await foreign.runs.approve(agent_run, by="maria", role="approver")
        async with await agentledger.RunClient.connect(
            settings.model_copy(update={"tenant": acme})
        ) as run_client:
            await run_client.runs.approve(agent_run, by="maria", role="approver")
        outcome = await asyncio.wait_for(handle.result(), 90)
    finally:
        process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), 60)
    assert code == 0, (tmp_path / "worker.log").read_text()
    assert outcome.agent_status == "completed" and outcome.refund is not None
    assert [json.loads(line)["request_id"] for line in ledger.read_text().splitlines()] == ["r-3"]
    receipt = await ops.receipt(pool, agent_run)
    assert receipt["outcome"] == "completed"
    said = (tmp_path / "worker.log").read_text()
    assert "polling" in said and "stopped" in said, said
