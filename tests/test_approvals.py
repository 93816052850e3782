"""Approvals: bound to one exact action, decided once, by the right role, before expiry."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from temporalio.client import WorkflowUpdateFailedError

from agentledger.core import constants as names
from agentledger.core.argument_schema import argument_problems
from agentledger.core.errors import OperationError
from agentledger.core.messages import RunMessages
from agentledger.core.wire import ApproveInput, RejectInput
from agentledger.workflows import AgentRunWorkflow
from agentledger.workflows.changes import for_new_run
from tests import client_ops as ops
from tests.support import make_spec, rows, run_result, wait_mirrored_status, wait_pending


async def finish(client, run_id):
    return await run_result(client, run_id)


async def test_edit_runs_the_edited_call_and_records_the_change(client, settings, pool, worker):
    async with worker():
        started = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
        pending = await wait_pending(client, started.run_id)
        edit = {"body": "Edited by a human."}
        await ops.approve(client, started.run_id, by="li", role="approver", edit=edit)
        result = await finish(client, started.run_id)

    assert result.status.value == "completed"
    sent = await rows(pool, "SELECT body, recipient FROM outbox WHERE run_id = %s", started.run_id)
    assert sent == [{"body": "Edited by a human.", "recipient": pending.arguments["to"]}]
    approval = (await ops.receipt(pool, started.run_id))["approvals"][0]
    assert approval["edit"] == edit
    assert approval["proposed_arguments"]["body"] == pending.arguments["body"]
    assert approval["final_arguments"]["body"] == "Edited by a human."


async def test_an_edit_the_tool_would_refuse_is_refused_and_the_run_still_waits(
    client, settings, pool, worker
):
    """The edit is checked against the tool's own argument schema before the run takes it:
    an approver never hears "approved" for a call that could not run."""
    async with worker():
        started = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
        pending = await wait_pending(client, started.run_id)
        assert pending.parameters is not None and "body" in pending.parameters["properties"]
        for edit, says in (
            ({"body": ""}, "body: '' should be non-empty"),
            ({"to": 5}, "to: 5 is not of type 'string'"),
            # JSON has no infinity: 1e400 reaches the run as null, which removes the field (a
            # merge patch), and the tool requires it.
            ({"subject": float("inf")}, "'subject' is a required property"),
            # A field the tool does not have: the tool would ignore it.
            ({"nosuch": "x"}, "nosuch: the tool has no such field"),
            ({"body": "ok", "Body": "x"}, "Body: the tool has no such field"),
        ):
            with pytest.raises(OperationError, match="invalid edit of send_message") as refused:
                await ops.approve(client, started.run_id, by="li", role="approver", edit=edit)
            assert says in str(refused.value), str(refused.value)
        assert (await wait_pending(client, started.run_id)).approval_id == pending.approval_id
        edit = {"body": "Fixed by a human."}
        await ops.approve(client, started.run_id, by="li", role="approver", edit=edit)
        assert (await finish(client, started.run_id)).status.value == "completed"
    sent = await rows(pool, "SELECT body FROM outbox WHERE run_id = %s", started.run_id)
    assert sent == [{"body": "Fixed by a human."}]
    [approval] = (await ops.receipt(pool, started.run_id))["approvals"]
    assert approval["edit"] == edit, "the receipt records the edit that was applied, only it"


@pytest.mark.parametrize(
    "schema",
    [{"type": "nonsense"}, {"$ref": "#/$defs/Missing"}, {"$ref": "https://example.com/x.json"}],
    ids=["unknown type", "missing def", "remote ref"],
)
def test_a_schema_that_cannot_be_applied_refuses_nothing(schema):
    """Checked in workflow code: a tool's schema the check cannot read (an MCP server's)
    must not fail the run's workflow task; the tool checks its arguments when it runs."""
    assert argument_problems(schema, {"to": 5}) == []
    assert argument_problems(
        {"type": "object", "properties": {"to": {"type": "string"}}}, {"to": 5}
    )


async def test_reject_cancels_the_run_without_the_side_effect(client, settings, pool, worker):
    async with worker():
        started = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
        await wait_pending(client, started.run_id)
        await ops.reject(client, started.run_id, by="li", role="approver", reason="wrong customer")
        result = await finish(client, started.run_id)

    assert result.status.value == "cancelled"
    assert "wrong customer" in (result.error or "")
    assert await rows(pool, "SELECT 1 FROM outbox WHERE run_id = %s", started.run_id) == []
    receipt = await ops.receipt(pool, started.run_id)
    assert receipt["outcome"] == "cancelled"
    assert receipt["approvals"][0]["decision"] == "rejected"
    assert receipt["side_effects"] == []


async def test_reject_with_replan_policy_lets_the_model_continue(client, settings, pool, worker):
    spec = make_spec(approval={"on_reject": "replan"})
    async with worker():
        started = await ops.start_run(client, spec, task_queue=settings.task_queue)
        await wait_pending(client, started.run_id)
        await ops.reject(client, started.run_id, by="li", role="approver", reason="not now")
        result = await finish(client, started.run_id)

    assert result.status.value == "completed"
    assert "did not run" in (result.answer or ""), "the model heard about the rejection"
    assert await rows(pool, "SELECT 1 FROM outbox WHERE run_id = %s", started.run_id) == []


@pytest.mark.parametrize(
    ("decision", "message"),
    [
        ({"role": "intern"}, "needs role 'approver'"),
        ({"action_hash": "0000000000000000"}, "stale approval"),
        ({"tenant": "someone-else"}, "no run .*: `agentledger list` shows the runs"),
        ({"by": "mallory"}, "not among the approvers"),
    ],
)
async def test_refused_decisions_change_nothing(client, settings, worker, decision, message):
    spec = make_spec(approval={"approvers": ["li", "maria"]})
    async with worker():
        started = await ops.start_run(client, spec, task_queue=settings.task_queue)
        pending = await wait_pending(client, started.run_id)
        before = await ops.status(client, started.run_id)
        kwargs = {"by": "li", "role": "approver", **decision}
        with pytest.raises(OperationError, match=message):
            await ops.approve(client, started.run_id, **kwargs)
        after = await ops.status(client, started.run_id)
        assert after == before, "a refused decision leaves the run exactly as it was"
        assert after.pending_approval == pending
        # The right person can still decide afterwards.
        await ops.approve(client, started.run_id, by="maria", role="approver")
        assert (await finish(client, started.run_id)).status.value == "completed"


async def test_an_approval_is_used_once(client, settings, worker):
    async with worker():
        started = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
        pending = await wait_pending(client, started.run_id)
        await ops.approve(client, started.run_id, by="li", role="approver")
        handle = client.get_workflow_handle(started.run_id)
        replay = ApproveInput(action_hash=pending.action_hash, by="li", role="approver")
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update(AgentRunWorkflow.approve, replay)
        await finish(client, started.run_id)


async def test_signals_decide_too_and_bad_signals_are_ignored(client, settings, pool, worker):
    async with worker():
        started = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
        pending = await wait_pending(client, started.run_id)
        handle = client.get_workflow_handle(started.run_id)
        wrong = ApproveInput(action_hash=pending.action_hash, by="eve", role="guest")
        await handle.signal(RunMessages.APPROVE.kept_signal, wrong)
        state = await ops.status(client, started.run_id)
        assert state.status.value == "waiting_for_approval", "a wrong-role signal is ignored"
        right = RejectInput(action_hash=pending.action_hash, by="li", role="approver", reason="no")
        await handle.signal(RunMessages.REJECT.kept_signal, right)
        result = await finish(client, started.run_id)

    assert result.status.value == "cancelled"
    refused = await rows(
        pool,
        "SELECT data->>'by' AS by FROM events WHERE run_id = %s AND type = 'approval.refused'",
        started.run_id,
    )
    assert refused == [{"by": "eve"}]


async def test_a_decision_signalled_with_the_start_comes_after_the_start_in_the_story(
    client, settings, pool, worker
):
    """A signal delivered with the start runs its handler before the run's own code: the
    refusal it records still follows `run.started`, which is event 1 of every run."""
    decision = ApproveInput(action_hash="0" * 16, by="eve", role="approver")
    handle = await client.start_workflow(
        AgentRunWorkflow.run,
        for_new_run(make_spec()),
        id="run-signalled-at-start",
        task_queue=settings.task_queue,
        start_signal=names.SIGNAL_APPROVE,
        start_signal_args=[decision],
    )
    async with worker():
        await wait_pending(client, handle.id)
        await ops.cancel(client, handle.id)
        await wait_mirrored_status(pool, handle.id, "cancelled")
    events = await rows(
        pool, "SELECT seq, type FROM events WHERE run_id = %s ORDER BY seq", handle.id
    )
    assert events[0] == {"seq": 1, "type": "run.started"}, events
    assert {"seq": 2, "type": "approval.refused"} in events, events


async def test_decisions_for_unknown_or_finished_runs_are_clear_errors(client, settings, worker):
    with pytest.raises(OperationError, match="no run 'run-nope'"):
        await ops.approve(client, "run-nope", by="li", role="approver")
    spec = make_spec("Summarize the order policy.", allowed_tools=["search_notes"])
    async with worker():
        started = await ops.start_run(client, spec, task_queue=settings.task_queue)
        await finish(client, started.run_id)
    with pytest.raises(OperationError, match="already ended"):
        await ops.approve(client, started.run_id, by="li", role="approver")
    with pytest.raises(OperationError, match="already ended"):
        await ops.control(client, started.run_id, "pause")


async def test_an_unanswered_approval_expires_and_fails_the_run(client, settings, pool, worker):
    spec = make_spec(approval={"timeout_seconds": 1.5})
    async with worker():
        started = await ops.start_run(client, spec, task_queue=settings.task_queue)
        await wait_pending(client, started.run_id)
        result = await finish(client, started.run_id)

    assert result.status.value == "failed"
    assert "expired" in (result.error or "")
    receipt = await ops.receipt(pool, started.run_id)
    assert receipt["approvals"][0]["decision"] == "expired"
    assert await rows(pool, "SELECT 1 FROM outbox WHERE run_id = %s", started.run_id) == []


async def test_waiting_run_holds_no_worker(client, settings, worker):
    """The gate is a durable timer/condition in history: with no worker at all, it still waits."""
    async with worker():
        started = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
        pending = await wait_pending(client, started.run_id)
    # No worker now. The decision is accepted by the server as soon as a worker returns.
    async with worker():
        # The fresh worker replays the run before it answers: on a loaded machine, a while.
        await ops.approve(client, started.run_id, by="li", role="approver", wait=60)
        result = await finish(client, started.run_id)
    assert result.status.value == "completed"
    assert pending.expires_at - pending.requested_at == timedelta(hours=24)


async def test_default_approval_waits_a_day_then_expires(skipping_env, settings, pool):
    """On the time-skipping server, a day of waiting passes in moments, with no worker held."""
    from tests.conftest import running_worker

    client = skipping_env.client
    async with running_worker(client, settings, pool):
        started = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
        await wait_pending(client, started.run_id)
        await skipping_env.sleep(timedelta(hours=25))  # a day passes on the server's clock
        result = await run_result(client, started.run_id)
    assert result.status.value == "failed"
    assert "expired" in (result.error or "")
    receipt = await ops.receipt(pool, started.run_id)
    approval = receipt["approvals"][0]
    assert approval["decision"] == "expired"
    waited = datetime.fromisoformat(approval["decided_at"]) - datetime.fromisoformat(
        approval["requested_at"]
    )
    assert waited >= timedelta(hours=24)
