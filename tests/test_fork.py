"""`starter.py fork`: a new run from a recorded step, with an edited output, repeating nothing."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError

import agentledger
from agentledger.core.errors import ForkError, OperationError
from agentledger.dev.offline_model import OfflineModelServer
from agentledger.workflows import AgentRunWorkflow
from tests import client_ops as fork_ops
from tests import client_ops as ops
from tests.support import make_spec, rows, run_result, scripted, wait_pending
from tests.test_cli import run_cli

EDITED = {"message_id": 4242, "to": "ana@example.com", "status": "EDITED-IN-FORK"}


async def finish(client, run_id):
    return await run_result(client, run_id)


async def completed_parent(client, settings, worker):
    """search_notes (2), approval (4), send_message (5), answer (6), verify (7)."""
    async with worker():
        started = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
        await wait_pending(client, started.run_id)
        await ops.approve(client, started.run_id, by="li", role="approver")
        assert (await finish(client, started.run_id)).status.value == "completed"
    return started.run_id


async def side_effects(pool, of: str | None = None):
    """The outbox and the ledger; with `of`, only a run's and its forks' rows (a fork's run id
    holds its parent's), so another test's late write in the same database is not counted."""
    lineage = f"%{of.removeprefix('run-')}%" if of else "%"
    return {
        "outbox": await rows(
            pool, "SELECT run_id, step_id FROM outbox WHERE run_id LIKE %s ORDER BY id", lineage
        ),
        "ledger": await rows(
            pool,
            "SELECT run_id, step_id, tool FROM tool_ledger WHERE run_id LIKE %s ORDER BY 1, 2",
            lineage,
        ),
    }


async def test_fork_at_the_tool_step_with_an_edited_output(
    client, settings, pool, worker, model_server, tmp_path
):
    parent = await completed_parent(client, settings, worker)
    steps = await rows(
        pool, "SELECT seq, type, name FROM steps WHERE run_id = %s ORDER BY seq", parent
    )
    send = next(s["seq"] for s in steps if s["name"] == "send_message" and s["type"] == "tool_call")
    before = await side_effects(pool, parent)
    calls_before = len(model_server.requests)

    async with worker():
        result = await run_cli(
            settings,
            tmp_path,
            "fork",
            parent,
            "--from-step",
            str(send),
            "--edit-output",
            json.dumps(EDITED),
            "--json",
        )
        assert result.code == 0, result.err
        fork = result.json()["run_id"]
        outcome = await finish(client, fork)

    assert outcome.status.value == "completed"
    assert "EDITED-IN-FORK" in (outcome.answer or "")  # the answer reflects the edit
    # Nothing before step N happened again, and step N itself was not run: the ledger and
    # the outbox are as the parent left them, and the model was asked once (the answer).
    assert await side_effects(pool, parent) == before
    assert len(model_server.requests) == calls_before + 1
    fork_steps = await rows(
        pool, "SELECT seq, type, name, status FROM steps WHERE run_id = %s ORDER BY seq", fork
    )
    assert [(s["seq"], s["type"], s["name"]) for s in fork_steps[:send]] == [
        (s["seq"], s["type"], s["name"]) for s in steps[:send]
    ]
    attempts = await rows(
        pool, "SELECT step_id FROM step_attempts WHERE run_id = %s ORDER BY step_id", fork
    )
    assert all(int(a["step_id"][:4]) > send for a in attempts)  # only steps after N ran
    # Both receipts name each other; the parent is untouched otherwise.
    fork_receipt = await ops.receipt(pool, fork)
    parent_receipt = await ops.receipt(pool, parent)
    assert fork_receipt["forked_from"]["parent_run_id"] == parent
    assert fork_receipt["forked_from"]["from_step"] == send
    assert parent_receipt["forks"] == [fork]
    assert fork_receipt["side_effects"] == []
    markdown = await run_cli(settings, tmp_path, "receipt", parent)
    assert f"**Forks:** {fork}" in markdown.out


async def test_a_fork_of_a_fork_and_a_live_step_n(client, settings, pool, worker, model_server):
    parent = await completed_parent(client, settings, worker)
    async with worker():
        # Fork at the search (step 2) with an edited result: everything after runs live.
        first = await fork_ops.fork_run(
            client,
            pool,
            parent,
            from_step=2,
            edit_output={"query": "refund", "matches": ["Refunds are instant (edited)."]},
            task_queue=settings.task_queue,
        )
        await wait_pending(client, first.run_id)  # the send, live, waits for approval again
        await ops.approve(client, first.run_id, by="li", role="approver")
        done = await finish(client, first.run_id)
        assert done.status.value == "completed"
        assert "Refunds are instant (edited)." in (done.answer or "")
        sent = await rows(pool, "SELECT body FROM outbox WHERE run_id = %s", first.run_id)
        assert len(sent) == 1 and "Refunds are instant (edited)." in sent[0]["body"]

        # Fork the fork at its answer (a model step, live): its send is not repeated.
        answer_step = next(
            s["seq"]
            for s in await rows(
                pool,
                "SELECT seq, type FROM steps WHERE run_id = %s ORDER BY seq DESC",
                first.run_id,
            )
            if s["type"] == "model_call"
        )
        second = await fork_ops.fork_run(
            client, pool, first.run_id, from_step=answer_step, task_queue=settings.task_queue
        )
        again = await finish(client, second.run_id)
    assert again.status.value == "completed"
    assert "Refunds are instant (edited)." in (again.answer or "")
    assert await rows(pool, "SELECT 1 FROM outbox WHERE run_id = %s", second.run_id) == []
    assert (await ops.receipt(pool, first.run_id))["forks"] == [second.run_id]
    assert (await ops.receipt(pool, second.run_id))["forked_from"]["parent_run_id"] == (
        first.run_id
    )
    # Asking for the same fork again returns it, not a new run.
    same = await fork_ops.fork_run(
        client, pool, first.run_id, from_step=answer_step, task_queue=settings.task_queue
    )
    assert same.existing and same.run_id == second.run_id


async def test_fork_refusals_are_clear(client, settings, pool, worker, tmp_path):
    parent = await completed_parent(client, settings, worker)
    # 5: refused by the run (no such step, not a step one may fork at); 2: invalid input.
    for args, message, code in (
        (["--from-step", "99"], "has no step 99", 5),
        (["--from-step", "4"], "fork at a model or tool step", 5),
        (["--from-step", "1", "--edit-output", "{}"], "fork at a tool step", 5),
        (["--from-step", "2", "--edit-output", "{nope"], "not valid JSON", 2),
        (["--from-step", "0"], "--from-step", 2),
    ):
        result = await run_cli(settings, tmp_path, "fork", parent, *args)
        assert result.code == code, (args, result.err)
        assert message in result.err, (args, result.err)
    result = await run_cli(settings, tmp_path, "fork", "run-nope", "--from-step", "2")
    assert result.code == 3, result.err  # not found


async def test_the_python_client_watches_and_forks(client, settings, pool, worker):
    run_client = await agentledger.RunClient.connect(settings)
    try:
        async with worker():
            started = await run_client.runs.start(
                "Look up our refund policy.", idempotency_key=f"py-{uuid.uuid4().hex[:10]}"
            )
            run_id = started.run_id
            live = [item async for item in run_client.runs.watch(run_id)]
            # A model step: asked again, live.
            fork_id = (await run_client.runs.fork(run_id, from_step=1)).run_id
            forked = await run_client.runs.result(fork_id)
            with pytest.raises(agentledger.InvalidInput, match="a step number, 1 or more, not 0"):
                await run_client.runs.fork(run_id, from_step=0)
        story = [item async for item in run_client.runs.watch(run_id)]  # ended: from the mirror
    finally:
        await run_client.close()
    assert live[0].type == "run.started" and live[-1].kind == "receipt"
    assert [i.seq for i in live if i.kind == "event"] == [i.seq for i in story if i.kind == "event"]
    assert forked.status.value == "completed"
    assert (await ops.receipt(pool, run_id))["forks"] == [fork_id]


# ---------------------------------------------------------------- forks inside a reply

TO_ANA = {"to": "ana@example.com", "subject": "Refunds", "body": "Refunds take 5 days."}
TO_BO = {"to": "bo@example.com", "subject": "Refunds", "body": "Refunds take 5 days."}
ANSWER = "## Summary\nDone.\n\n## Actions\nSent one message, to bo."


async def rejected_then_sent(client, settings, pool, worker, model):
    """One reply, two sends: the first rejected, the second approved and sent.
    Steps: model (1), approval rejected (2), approval (3), send to bo (4), model (5), verify."""
    spec = make_spec("Tell ana and bo about refunds.", approval={"on_reject": "replan"})
    async with worker(base_url=model.base_url):
        started = await ops.start_run(client, spec, task_queue=settings.task_queue)
        await wait_pending(client, started.run_id)
        await ops.reject(client, started.run_id, by="li", role="approver", reason="not ana")
        pending = await wait_pending(client, started.run_id)
        assert pending.arguments == TO_BO
        await ops.approve(client, started.run_id, by="li", role="approver")
        assert (await finish(client, started.run_id)).status.value == "completed"
    steps = await rows(
        pool,
        "SELECT seq, type, status, input FROM steps WHERE run_id = %s ORDER BY seq",
        started.run_id,
    )
    assert [(s["type"], s["status"]) for s in steps[:4]] == [
        ("model_call", "completed"),
        ("approval", "rejected"),
        ("approval", "approved"),
        ("tool_call", "completed"),
    ]
    return started.run_id


def two_sends():
    return OfflineModelServer(scripted([("send_message", TO_ANA), ("send_message", TO_BO)], ANSWER))


async def test_an_edit_after_a_rejected_call_lands_on_the_steps_own_call(
    client, settings, pool, worker
):
    with two_sends() as model:
        parent = await rejected_then_sent(client, settings, pool, worker, model)
        before = await side_effects(pool, parent)
        async with worker(base_url=model.base_url):
            forked = await fork_ops.fork_run(
                client,
                pool,
                parent,
                from_step=4,
                edit_output={"message_id": 1, "to": "bo@example.com", "status": "EDITED"},
                task_queue=settings.task_queue,
            )
            outcome = await finish(client, forked.run_id)  # no approval: nothing runs live
    assert outcome.status.value == "completed"
    step = await rows(
        pool, "SELECT type, input, output FROM steps WHERE run_id = %s AND seq = 4", forked.run_id
    )
    assert step[0]["input"] == TO_BO, "the edit stands for the call step 4 made"
    assert step[0]["output"]["status"] == "EDITED"
    assert await side_effects(pool, parent) == before, "ana's rejected message was not sent"


async def test_a_fork_at_a_tool_step_without_an_edit_completes_without_a_second_effect(
    client, settings, pool, worker, tmp_path
):
    with two_sends() as model:
        parent = await rejected_then_sent(client, settings, pool, worker, model)
        before = await side_effects(pool, parent)
        async with worker(base_url=model.base_url):
            result = await run_cli(settings, tmp_path, "fork", parent, "--from-step", "4", "--json")
            assert result.code == 0, result.err
            fork = result.json()["run_id"]
            pending = await wait_pending(client, fork)  # step 4 runs live: asked again
            assert pending.arguments == TO_BO
            await ops.approve(client, fork, by="li", role="approver")
            outcome = await finish(client, fork)
    assert outcome.status.value == "completed"
    # The send to bo happened in the parent: the fork finds its ledger row, sends nothing.
    assert await side_effects(pool, parent) == before
    receipt = await ops.receipt(pool, fork)
    assert [(e["tool"], e["duplicate_prevented"]) for e in receipt["side_effects"]] == [
        ("send_message", True)
    ]


# ---------------------------------------------------------------- every step of recorded runs


async def drive(client, run_id):
    """Approve whatever the run asks until it ends; it must not sit stuck meanwhile."""
    handle = client.get_workflow_handle_for(AgentRunWorkflow.run, run_id)
    for _ in range(600):
        state = await ops.status(client, run_id)
        if state.status.value in ("completed", "failed", "cancelled"):
            return await handle.result()
        if state.pending_approval is not None:
            try:
                await ops.approve(client, run_id, by="li", role="approver")
            except OperationError:
                pass  # decided meanwhile
        await asyncio.sleep(0.1)
    raise AssertionError(f"{run_id} did not end: {state.status.value}")


async def test_a_fork_at_every_step_of_recorded_runs_completes_or_is_refused_and_repeats_nothing(
    client, settings, pool, worker
):
    with two_sends() as first:
        rejected = await rejected_then_sent(client, settings, pool, worker, first)
        async with worker(base_url=first.base_url):
            approved = await ops.start_run(
                client, make_spec("Tell bo."), task_queue=settings.task_queue
            )
            await drive(client, approved.run_id)
    refused_first = scripted(
        [("no_such_tool", {"x": 1}), ("send_message", TO_ANA)], "no summary here", ANSWER
    )
    with OfflineModelServer(refused_first) as model:
        async with worker(base_url=model.base_url):
            replanned = await ops.start_run(
                client, make_spec("Tell ana."), task_queue=settings.task_queue
            )
            assert (await drive(client, replanned.run_id)).status.value == "completed"
    cases = [(rejected, two_sends), (approved.run_id, two_sends)]
    cases.append((replanned.run_id, lambda: OfflineModelServer(refused_first)))
    before = await side_effects(pool)
    outcomes: dict[str, str] = {}
    for parent, model_for in cases:
        steps = await rows(
            pool, "SELECT seq, type FROM steps WHERE run_id = %s ORDER BY seq", parent
        )
        with model_for() as model:
            async with worker(base_url=model.base_url):
                for step in steps:
                    edits = [None] + ([{"status": "EDITED"}] if step["type"] == "tool_call" else [])
                    for edit in edits:
                        case = f"{parent} step {step['seq']} ({step['type']}, edit={edit})"
                        key = fork_ops.default_key(parent, step["seq"], edit)
                        try:
                            forked = await fork_ops.fork_run(
                                client,
                                pool,
                                parent,
                                from_step=step["seq"],
                                edit_output=edit,
                                task_queue=settings.task_queue,
                            )
                        except ForkError as refused:
                            assert step["type"] not in ("model_call",), (case, refused)
                            with pytest.raises(RPCError):  # refused before anything started
                                await client.get_workflow_handle(ops.run_id_for(key)).describe()
                            outcomes[case] = "refused"
                            continue
                        done = await drive(client, forked.run_id)
                        outcomes[case] = done.status.value
                        receipt = await ops.receipt(pool, forked.run_id)
                        assert receipt["outcome"] == done.status.value, case
                        assert receipt["forked_from"]["from_step"] == step["seq"], case
    assert set(outcomes.values()) <= {"completed", "refused"}, outcomes
    refused = [c for c, o in outcomes.items() if o == "refused"]
    assert all("approval" in c or "verify" in c for c in refused), refused
    # No effect a parent made happened again in any of its forks: a fork's send of what its
    # parent sent found the parent's ledger row. (A fork may send what its parent did not:
    # here every approval is approved, the one the parent rejected too.)
    after = await side_effects(pool)
    assert after["outbox"][: len(before["outbox"])] == before["outbox"]
    for parent, _ in cases:
        sent = await rows(
            pool, "SELECT recipient, subject, body FROM outbox WHERE run_id = %s", parent
        )
        again = await rows(
            pool,
            """SELECT o.run_id, o.recipient FROM outbox o JOIN run_forks f
               ON f.fork_run_id = o.run_id WHERE f.parent_run_id = %s""",
            parent,
        )
        assert not [m for m in again if m["recipient"] in {s["recipient"] for s in sent}], (
            parent,
            again,
        )


async def test_a_fork_that_fails_verification_ends_failed_in_temporal_too(
    client, settings, pool, worker
):
    """The fork's edited output makes its answer fail the parent's checks; Temporal
    shows the fork Failed, as agentledger does, and its result and receipt still read."""
    spec = make_spec(verify={"forbidden": [EDITED["status"]], "on_failure": "fail"})
    async with worker():
        started = await ops.start_run(client, spec, task_queue=settings.task_queue)
        await wait_pending(client, started.run_id)
        await ops.approve(client, started.run_id, by="li", role="approver")
        assert (await finish(client, started.run_id)).status.value == "completed"
        steps = await rows(
            pool, "SELECT seq, type, name FROM steps WHERE run_id = %s", started.run_id
        )
        send = next(
            s["seq"] for s in steps if s["name"] == "send_message" and s["type"] == "tool_call"
        )
        fork = await fork_ops.fork_run(
            client,
            pool,
            started.run_id,
            from_step=send,
            edit_output=EDITED,
            task_queue=settings.task_queue,
        )
        result = await finish(client, fork.run_id)
        described = await client.get_workflow_handle(fork.run_id).describe()
        state = await ops.status(client, fork.run_id)
    assert result.status.value == "failed" and "verification failed" in (result.error or "")
    assert described.status == WorkflowExecutionStatus.FAILED
    assert state.status.value == "failed"
    assert (await ops.receipt(pool, fork.run_id))["outcome"] == "failed"
    parent = await client.get_workflow_handle(started.run_id).describe()
    assert parent.status == WorkflowExecutionStatus.COMPLETED
