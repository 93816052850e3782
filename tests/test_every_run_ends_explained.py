"""Holes an audit found in "nothing lost, nothing twice", each shown closed on the real stack.

Each test is named after the promise it keeps; the audit's number is in its docstring.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import UpdateWorkflowExecutionLifecycleStage
from temporalio.api.update.v1 import UpdateRef, WaitPolicy
from temporalio.api.workflowservice.v1 import (
    DeleteWorkflowExecutionRequest,
    PollWorkflowExecutionUpdateRequest,
)
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowUpdateFailedError,
    WorkflowUpdateStage,
)
from temporalio.service import RPCError, RPCStatusCode

import agentledger.demo
from agentledger.core.messages import RunMessages
from agentledger.core.results import DecisionResult, RunResult
from agentledger.core.states import RunStatus
from agentledger.core.wire import ApproveInput, MirrorBatch, RunSnapshot
from agentledger.dev.offline_model import OfflineModelServer, completion
from agentledger.store.db import RESERVED_CONNECTIONS, open_pool
from agentledger.store.mirror_store import MirrorStore
from agentledger.tools import Tool, ToolContext, ToolRegistry
from agentledger.workflows import AgentRunWorkflow
from tests import client_ops as ops
from tests.conftest import running_worker
from tests.support import (
    eventually,
    make_spec,
    rows,
    run_result,
    scripted,
    wait_pending,
    wait_status,
)

SUMMARY = "## Summary\nDone."
NUL = "\x00"


async def run_to_end(client: Any, spec: Any, task_queue: str, seconds: float = 60) -> RunResult:
    started = await ops.start_run(client, spec, task_queue=task_queue)
    return await asyncio.wait_for(run_result(client, started.run_id), seconds)


# ---------------------------------------------------------------- 1: values Postgres refuses


async def test_a_nul_in_the_task_the_model_output_and_tool_arguments_ends_recorded(
    client, settings, pool, worker
):
    """#1: a NUL used to make every mirror write fail for ever: no receipt, mirror frozen."""
    turns = scripted(
        [("search_notes", {"query": f"refund{NUL}policy"})],
        f"## Summary\nThe policy{NUL} is generous.",
    )
    spec = make_spec(f"Find the refund{NUL} policy", allowed_tools=["search_notes"])
    with OfflineModelServer(turns) as model:
        async with worker(base_url=model.base_url):
            result = await run_to_end(client, spec, settings.task_queue)
            report = await ops.check_mirror(client, pool, result.run_id)
    assert result.status == RunStatus.COMPLETED
    receipt = await ops.receipt(pool, result.run_id)
    assert receipt["outcome"] == "completed"
    assert receipt["answer"] == "## Summary\nThe policy\\u0000 is generous."
    assert receipt["task"] == "Find the refund\\u0000 policy"
    [step] = await rows(
        pool,
        "SELECT input FROM steps WHERE run_id = %s AND type = 'tool_call'",
        result.run_id,
    )
    assert step["input"] == {"query": "refund\\u0000policy"}
    assert report["agrees"], report["differences"]


async def test_a_row_postgres_refuses_is_recorded_the_run_ends_and_mirror_check_names_it(
    client, settings, pool
):
    """#1: a write no retry can fix used to retry for ever. Here each model call costs $60M
    (a hostile usage figure): each step's row holds that, the run's total of two does not
    fit numeric(14, 6)."""
    play = scripted([("search_notes", {"query": "refunds"})], SUMMARY)

    def expensive(request: dict[str, Any]) -> Any:
        reply = play(request)
        reply.body["usage"] = {
            "prompt_tokens": 60_000_000,
            "completion_tokens": 0,
            "total_tokens": 60_000_000,
        }
        return reply

    priced = settings.model_copy(update={"model_prices": {"offline-planner": (1_000_000.0, 0.0)}})
    spec = make_spec("Find the refund policy", allowed_tools=["search_notes"])
    with OfflineModelServer(expensive) as model:
        async with running_worker(client, priced, pool, base_url=model.base_url):
            result = await run_to_end(client, spec, settings.task_queue)
            report = await ops.check_mirror(client, pool, result.run_id)
    assert result.status == RunStatus.COMPLETED
    receipt = await ops.receipt(pool, result.run_id)
    assert receipt["outcome"] == "completed" and receipt["cost_usd"] > 1e8
    failures = await rows(
        pool, "SELECT target, error FROM mirror_failures WHERE run_id = %s", result.run_id
    )
    assert failures and all(f["target"] == "runs" for f in failures)
    assert all("NumericValueOutOfRange" in f["error"] for f in failures)
    # The rest of each refused batch landed: the steps are there.
    steps = await rows(pool, "SELECT type FROM steps WHERE run_id = %s ORDER BY seq", result.run_id)
    assert [s["type"] for s in steps] == ["model_call", "tool_call", "model_call", "verify"]
    assert not report["agrees"]
    assert report["counts"]["unwritable"] >= 1
    assert any(d.startswith("unwritable runs") for d in report["differences"])


# ---------------------------------------------------------------- 6: an id Temporal forgot


async def test_a_run_id_temporal_forgot_is_not_started_again_over_the_old_run(
    client, settings, pool, worker
):
    """#6: after retention, a start with the same key used to reuse the old conversation,
    journal and ledger under a new execution. It returns the recorded run instead."""
    spec = make_spec("Say hello", allowed_tools=[])
    with OfflineModelServer(scripted(SUMMARY)) as model:
        async with worker(base_url=model.base_url):
            first = await run_to_end(client, spec, settings.task_queue)
    # What retention does: Temporal deletes the closed run.
    await client.workflow_service.delete_workflow_execution(
        DeleteWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=first.run_id),
        )
    )

    async def forgotten() -> bool:
        try:
            await client.get_workflow_handle(first.run_id).describe()
        except RPCError as err:
            return err.status == RPCStatusCode.NOT_FOUND
        return False

    await eventually(forgotten, seconds=60, what="Temporal to delete the run")

    again = await ops.start_run(client, spec, task_queue=settings.task_queue, mirror=pool)
    assert again.existing and again.run_id == first.run_id
    assert await forgotten(), "no new execution was started under the old id"
    assert (await ops.receipt(pool, first.run_id))["outcome"] == "completed"


# ---------------------------------------------------------------- 10: what was paid for


async def test_a_response_the_run_never_used_shows_as_unaccepted_in_the_receipt(
    client, settings, pool
):
    """#10: the receipt's unaccepted tokens and cost were always 0. A reply too large to
    hand to the workflow is paid for and journaled, and never used."""

    def huge(request: dict[str, Any]) -> Any:
        return completion(request, content="## Summary\n" + "y" * 300_000)

    small = settings.model_copy(update={"payload_limit_bytes": 100_000})
    with OfflineModelServer(huge) as model:
        async with running_worker(client, small, pool, base_url=model.base_url):
            result = await run_to_end(client, make_spec("write a lot"), settings.task_queue)
    assert result.status == RunStatus.FAILED
    [journal] = await rows(
        pool,
        "SELECT tokens_in + tokens_out AS tokens, cost_usd::float AS cost FROM model_journal"
        " WHERE run_id = %s",
        result.run_id,
    )
    receipt = await ops.receipt(pool, result.run_id)
    assert journal["tokens"] > 0
    assert receipt["unaccepted_tokens"] == journal["tokens"]
    assert receipt["unaccepted_cost_usd"] == journal["cost"] > 0


async def test_the_judge_is_journaled_and_its_response_counts_as_used(
    client, settings, pool, worker
):
    """#10: an LLM judge's call was not journaled: a retry paid again, and no receipt saw it."""

    def model(request: dict[str, Any]) -> Any:
        if request.get("response_format"):
            return completion(request, content='{"pass": true, "reason": "fine"}')
        return completion(request, content=SUMMARY)

    spec = make_spec("Say hello", allowed_tools=[], verify={"judge": {"rubric": "Be brief."}})
    with OfflineModelServer(model) as server:
        async with worker(base_url=server.base_url):
            result = await run_to_end(client, spec, settings.task_queue)
    assert result.status == RunStatus.COMPLETED
    journal = await rows(
        pool,
        "SELECT step_id, tokens_in + tokens_out AS tokens FROM model_journal WHERE run_id = %s"
        " ORDER BY step_id",
        result.run_id,
    )
    assert [j["step_id"] for j in journal] == ["0001-model_call", "0002-verify"]
    receipt = await ops.receipt(pool, result.run_id)
    assert receipt["verification"]["usage"]["input_tokens"] > 0
    assert receipt["unaccepted_tokens"] == 0, "the judge's response was used"


# ---------------------------------------------------------------- 11: the pool


class Note(BaseModel):
    text: str


async def test_tools_holding_a_connection_while_checkpointing_do_not_starve_the_pool(
    client, settings, database_url
):
    """#11: a transactional tool held a connection in its transaction and took a second
    from the same pool for its checkpoint and its lease: when the tools running at once
    outnumbered the free connections, each waited for another's, into PoolTimeout. Here the
    rest of the worker's pool is busy (as under load), two connections are free, and four
    such tools run."""
    holding = 0
    most_holding = 0
    all_held = asyncio.Event()

    async def note_slowly(args: Note, ctx: ToolContext) -> dict[str, str]:
        nonlocal holding, most_holding
        holding += 1
        most_holding = max(most_holding, holding)
        if holding == free:
            all_held.set()
        try:
            # The first calls hold their transactions' connections until they hold every
            # free one: then each commits a checkpoint, with no connection free.
            await asyncio.wait_for(all_held.wait(), 30)
            await ctx.save_checkpoint({"noted": args.text})
            await ctx.conn.execute("SELECT 1")
        finally:
            holding -= 1
        return {"noted": args.text}

    slow = Tool("note_slowly", "note", Note, note_slowly, side_effect=True)
    registry = ToolRegistry([*agentledger.demo.registry.tools(), slow])
    free = 2
    small = await open_pool(database_url, max_size=RESERVED_CONNECTIONS + 8)
    turns = scripted([("note_slowly", {"text": "hi"})], SUMMARY)
    try:
        with OfflineModelServer(turns) as model:
            async with (
                running_worker(
                    client, settings, small, registry=registry, base_url=model.base_url
                ) as running,
                contextlib.AsyncExitStack() as busy,
            ):
                run_slots = running.workers[0].config()["max_concurrent_activities"]
                assert run_slots >= 4, "four tool calls can run at once"
                for _ in range(small.max_size - free):
                    await busy.enter_async_context(small.connection())
                specs = [make_spec("note it", allowed_tools=["note_slowly"]) for _ in range(4)]
                results = await asyncio.gather(
                    *(run_to_end(client, s, settings.task_queue, 120) for s in specs)
                )
        assert all(r.status == RunStatus.COMPLETED for r in results)
        assert most_holding == free, "the tools' transactions held every free connection"
        failed = await rows(
            small,
            "SELECT error FROM step_attempts WHERE run_id = ANY(%s) AND status <> 'succeeded'",
            [r.run_id for r in results],
        )
        assert failed == [], "no attempt timed out waiting for a connection"
        checkpoints = await rows(
            small,
            "SELECT checkpoint FROM steps WHERE run_id = ANY(%s) AND type = 'tool_call'",
            [r.run_id for r in results],
        )
        assert [c["checkpoint"] for c in checkpoints] == [{"noted": "hi"}] * 4
    finally:
        await small.close()


# ---------------------------------------------------------------- 12: the mirror's upkeep


async def test_list_and_stats_since_read_runs_by_an_index_on_created_at(pool):
    """#12: `list` (newest first) and `stats --since` scanned every run."""
    async with pool.connection() as conn, conn.transaction():
        await conn.execute("SET LOCAL enable_seqscan = off")
        cur = await conn.execute(
            "EXPLAIN SELECT run_id FROM runs ORDER BY created_at DESC LIMIT 50"
        )
        listing = "\n".join(row[0] for row in await cur.fetchall())
        cur = await conn.execute(
            "EXPLAIN SELECT count(*) FROM runs WHERE created_at >= now() - interval '7 days'"
        )
        since = "\n".join(row[0] for row in await cur.fetchall())
    assert "runs_created_idx" in listing
    assert "runs_created_idx" in since


async def test_a_late_run_checkpoint_write_cannot_overwrite_a_newer_one(pool):
    """#12: `checkpoint.save` wrote unfenced: retried late, it put back an older checkpoint."""
    store = MirrorStore(pool)
    now = datetime.now(UTC)
    run_id = f"run-fence-{now.timestamp()}"
    snapshot = RunSnapshot(
        run_id=run_id,
        version=5,
        tenant="t",
        user="u",
        task="x",
        status=RunStatus.PLANNING,
        checkpoint={"page": 2},
        created_at=now,
        updated_at=now,
    )
    await store.sync(MirrorBatch(run=snapshot, fence=50))
    assert not await store.save_run_checkpoint(run_id, {"page": 1}, fence=10)
    assert await store.save_run_checkpoint(run_id, {"page": 3}, fence=60)
    [run] = await rows(pool, "SELECT checkpoint FROM runs WHERE run_id = %s", run_id)
    assert run["checkpoint"] == {"page": 3}


# ---------------------------------------------------------------- people and cancels


def gated_registry(gate: asyncio.Event, started: asyncio.Event) -> ToolRegistry:
    """`wait_here`: a read-only tool that holds its step until the test opens the gate."""

    async def wait_here(args: Note, ctx: ToolContext) -> dict[str, str]:
        started.set()
        await gate.wait()
        return {"waited": args.text}

    return ToolRegistry(
        [*agentledger.demo.registry.tools(), Tool("wait_here", "wait", Note, wait_here)]
    )


async def test_a_pause_accepted_just_before_continue_as_new_takes_effect_first(
    client, settings, pool
):
    """#2: the continue-as-new check ran before the step boundary, and a pause accepted
    just before it went with the old generation; events handlers emitted were lost."""
    gate, started = asyncio.Event(), asyncio.Event()
    turns = scripted([("wait_here", {"text": "a"})], SUMMARY)
    # The held tool an activity of its own, so the pause reaches the run while it holds.
    spec = make_spec(
        "wait, then finish",
        allowed_tools=["wait_here"],
        history_events_limit=100,
        local_read_only_tools=False,
    )
    with OfflineModelServer(turns) as model:
        async with running_worker(
            client, settings, pool, registry=gated_registry(gate, started), base_url=model.base_url
        ):
            begun = await ops.start_run(client, spec, task_queue=settings.task_queue)
            handle = client.get_workflow_handle(begun.run_id)
            first_execution = (await handle.describe()).run_id
            await asyncio.wait_for(started.wait(), 30)
            # While the tool holds its step, people pause it, again and again: the history
            # grows past its limit, so the run continues as new at its next boundary.
            for _ in range(25):
                await ops.control(client, begun.run_id, "pause", by="ops")
            gate.set()
            state = await wait_status(client, begun.run_id, "paused")
            assert state.pause_requested
            assert (await handle.describe()).run_id == first_execution, "paused before it moved"
            await ops.control(client, begun.run_id, "resume", by="ops")
            result = await asyncio.wait_for(
                client.get_workflow_handle_for(AgentRunWorkflow.run, begun.run_id).result(), 60
            )
    assert result.status == RunStatus.COMPLETED
    events = await rows(
        pool, "SELECT seq, type FROM events WHERE run_id = %s ORDER BY seq", begun.run_id
    )
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), "no gaps"
    kinds = [e["type"] for e in events]
    assert kinds.count("pause.requested") == 25
    assert kinds.index("run.paused") < kinds.index("run.continued_as_new")


async def test_a_backlog_stop_accepted_just_before_continue_as_new_takes_effect_first(
    client, settings, pool
):
    """#2: a backlog `stop` pauses its running task's run with a signal; one that came while
    the run's last step before its continue-as-new was under way went with the old
    generation. The stop now pauses the run where it is, and the backlog's word holds."""
    from agentledger.core.backlog_models import child_run_id
    from tests import client_ops as bops
    from tests.backlog_support import end_backlog, item, new_agent, wait_states

    gate, started = asyncio.Event(), asyncio.Event()
    # One reply of many calls, the last held: the run's history passes its limit (100
    # events) during that reply, and the next boundary is where it continues as new.
    searches = [("search_notes", {"query": f"refunds {n}"}) for n in range(20)]
    turns = scripted([*searches, ("wait_here", {"text": "a"})], SUMMARY)
    agent = new_agent()
    task = item(
        "long",
        "search, wait, then finish",
        allowed_tools=["search_notes", "wait_here"],
        history_events_limit=100,
        local_read_only_tools=False,  # twenty local searches would fit under the limit
    )
    run_id = child_run_id(agent, "long", 1)
    try:
        with OfflineModelServer(turns) as model:
            async with running_worker(
                client,
                settings,
                pool,
                registry=gated_registry(gate, started),
                base_url=model.base_url,
            ):
                await bops.enqueue(client, agent, [task], task_queue=settings.task_queue)
                await asyncio.wait_for(started.wait(), 30)
                run = client.get_workflow_handle(run_id)
                described = await run.describe()
                first_execution = described.run_id
                assert described.history_length >= 100, "it continues as new next"
                stopped = await bops.stop(client, agent, by="ops")
                assert stopped.tasks == ["long"]

                async def heard() -> bool:
                    return (await ops.status(client, run_id)).pause_requested

                await eventually(heard, what="the run to hear the stop")
                gate.set()
                state = await wait_status(client, run_id, "paused")
                assert state.pause_requested
                assert (await run.describe()).run_id == first_execution, "paused before it moved"
                await wait_states(pool, agent, {"long": "paused"})
                await bops.resume(client, agent, by="ops")
                await wait_states(pool, agent, {"long": "done"}, seconds=60)
                result = await asyncio.wait_for(
                    client.get_workflow_handle_for(AgentRunWorkflow.run, run_id).result(), 60
                )
    finally:
        await end_backlog(client, agent)
    assert result.status == RunStatus.COMPLETED
    events = await rows(pool, "SELECT seq, type FROM events WHERE run_id = %s ORDER BY seq", run_id)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), "no gaps"
    kinds = [e["type"] for e in events]
    assert kinds.count("run.paused") == 1
    assert kinds.index("run.paused") < kinds.index("run.resumed")
    assert kinds.index("run.resumed") < kinds.index("run.continued_as_new")


async def test_a_cancel_during_the_receipt_phase_still_leaves_the_receipt(
    client, settings, pool, worker
):
    """#3: the receipt phase was outside the cancellable part, and its awaited mirror write
    was cancelled with the run: a cancel there (likely in a Postgres outage) left none."""
    spec = make_spec("Say hello", allowed_tools=[])
    with OfflineModelServer(scripted(SUMMARY)) as model:
        async with worker(base_url=model.base_url):
            begun = await ops.start_run(client, spec, task_queue=settings.task_queue)
            await eventually(
                lambda: rows(pool, "SELECT 1 FROM runs WHERE run_id = %s", begun.run_id),
                what="the run row",
            )
            async with pool.connection() as conn, conn.transaction():
                # The mirror is stuck (as in an outage): every write to this run row waits.
                lock = "SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE"
                await conn.execute(lock, (begun.run_id,))
                await wait_status(client, begun.run_id, "completed")
                await client.get_workflow_handle(begun.run_id).cancel()
                await asyncio.sleep(1)
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, begun.run_id)
            result = await asyncio.wait_for(handle.result(), 60)
    assert result.status == RunStatus.COMPLETED, "the cancel came after the run had ended"
    receipt = await ops.receipt(pool, begun.run_id)
    assert receipt["outcome"] == "completed"


@pytest.mark.parametrize("stubborn", [True, False], ids=["finishes", "stops"])
async def test_a_cancel_during_a_side_effect_leaves_its_outcome_in_the_receipt(
    client, settings, pool, stubborn
):
    """#4: a side-effecting step was cancelled with TRY_CANCEL: the run wrote its receipt
    at once, while the attempt went on and maybe committed its effect, which no receipt
    showed. Now the run waits for the attempt: an effect that finished is in the receipt,
    one the cancel stopped is there as not happened."""
    began = asyncio.Event()

    async def send_slowly(args: Note, ctx: ToolContext) -> dict[str, str]:
        began.set()
        if stubborn:  # an effect that cannot be interrupted once under way (a payment)
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(2)
        else:
            await asyncio.sleep(30)
        await ctx.conn.execute("SELECT 1")
        return {"sent": args.text}

    slow = Tool("send_slowly", "send", Note, send_slowly, side_effect=True)
    registry = ToolRegistry([*agentledger.demo.registry.tools(), slow])
    turns = scripted([("send_slowly", {"text": "pay"})], SUMMARY)
    spec = make_spec(
        "pay",
        allowed_tools=["send_slowly"],
        timeouts={"heartbeat_seconds": 1, "initial_retry_seconds": 0.2},
    )
    with OfflineModelServer(turns) as model:
        async with running_worker(
            client, settings, pool, registry=registry, base_url=model.base_url
        ):
            begun = await ops.start_run(client, spec, task_queue=settings.task_queue)
            await asyncio.wait_for(began.wait(), 30)
            await client.get_workflow_handle(begun.run_id).cancel()
            await eventually(
                lambda: rows(pool, "SELECT 1 FROM receipts WHERE run_id = %s", begun.run_id),
                what="the receipt",
            )
    ledger = await rows(
        pool, "SELECT idempotency_key, status FROM tool_ledger WHERE run_id = %s", begun.run_id
    )
    receipt = await ops.receipt(pool, begun.run_id)
    assert receipt["outcome"] == "cancelled"
    [effect] = receipt["side_effects"]
    [step] = [s for s in receipt["steps"] if s["type"] == "tool_call"]
    if stubborn:
        assert [row["status"] for row in ledger] == ["done"], "the effect committed"
        assert effect["idempotency_key"] == ledger[0]["idempotency_key"]
        assert effect["ok"] and step["status"] == "completed"
    else:
        assert ledger == [], "the cancel rolled the effect back"
        assert not effect["ok"] and effect["reconciliation"].startswith("did not happen")
        assert step["status"] == "cancelled"


@pytest.mark.parametrize("batch", [False, True], ids=["jobs-in-sets", "jobs-as-one-batch"])
@pytest.mark.parametrize("cancel_first", [True, False], ids=["cancel-first", "approve-first"])
async def test_an_approval_that_comes_with_a_cancel_is_told_what_the_receipt_says(
    client, settings, pool, cancel_first, batch
):
    """#12: an approval the run never applied (a cancel came with it) was told "applied".

    With no worker running, the cancel and the approval both wait for the run's next workflow
    task, so they reach it in one activation, whichever the server took first. How the SDK
    orders them decides who wins: applying the update's job and running the workflow before
    the cancel's job (temporalio 1.35's default), the run applies the decision, then is
    cancelled; applying all jobs as one batch (the SDK's coming default), the cancel ends the
    run first. Either way the approver is told what the receipt records."""
    begun = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
    async with running_worker(client, settings, pool):
        pending = await wait_pending(client, begun.run_id)
    handle = client.get_workflow_handle_for(AgentRunWorkflow.run, begun.run_id)
    decision = ApproveInput(action_hash=pending.action_hash, by="li", role="approver")

    update_id = f"approve-{uuid.uuid4().hex[:8]}"

    async def approve() -> DecisionResult:
        update = await handle.start_update(
            AgentRunWorkflow.approve,
            decision,
            id=update_id,
            wait_for_stage=WorkflowUpdateStage.ACCEPTED,
        )
        return await update.result()

    if cancel_first:
        await handle.cancel()
        approving = asyncio.create_task(approve())
        await update_admitted(client, begun.run_id, update_id)
    else:
        approving = asyncio.create_task(approve())
        await update_admitted(client, begun.run_id, update_id)
        await handle.cancel()
    assert not approving.done(), "nothing decides while no worker runs"
    async with running_worker(client, settings, pool, batch_activations=batch):
        try:
            told: DecisionResult | None = await asyncio.wait_for(approving, 60)
        except WorkflowUpdateFailedError as refused:
            # The server may hand the update to a later workflow task than the cancel's, as it
            # may on a loaded machine: the run has ended by then, says so, and applies nothing.
            assert "already ended as cancelled" in str(refused.cause)
            told = None
        with pytest.raises(WorkflowFailureError):
            await asyncio.wait_for(handle.result(), 60)
    receipt = await ops.receipt(pool, begun.run_id)
    assert receipt["outcome"] == "cancelled"
    assert told is None or told.approval_id == pending.approval_id
    [step] = [s for s in receipt["steps"] if s["type"] == "approval"]
    if batch or told is None:
        if told is not None:
            assert told.decision == "abandoned" and told.status == RunStatus.CANCELLED
        assert receipt["approvals"] == [], "no decision was applied"
        assert receipt["unresolved"] == [
            f"approval {pending.approval_id} for {pending.tool} undecided"
        ]
        assert step["status"] == "abandoned"
    else:
        assert told.decision == "approved", "then the run went on, and the cancel came"
        assert [(a["decision"], a["by"]) for a in receipt["approvals"]] == [("approved", "li")]
        assert step["status"] == "approved"
    assert await rows(pool, "SELECT 1 FROM outbox WHERE run_id = %s", begun.run_id) == [], (
        "the cancel came before the approved action could run"
    )


async def test_an_invalid_budget_edit_is_refused_and_the_run_goes_on(
    client, settings, pool, worker
):
    """#5: the validator never looked at the edit: {"max_tokens": -5} was accepted, and
    every later workflow task failed on it; as a signal it stayed in history for good."""
    spec = make_spec("Say hello", allowed_tools=[], budget={"max_tokens": 1})
    with OfflineModelServer(scripted(SUMMARY)) as model:
        async with worker(base_url=model.base_url):
            begun = await ops.start_run(client, spec, task_queue=settings.task_queue)
            pending = await wait_pending(client, begun.run_id)
            assert pending.kind == "budget"
            with pytest.raises(ops.OperationError, match="invalid budget edit"):
                await ops.approve(
                    client, begun.run_id, by="maria", role="approver", edit={"max_tokens": -5}
                )
            handle = client.get_workflow_handle(begun.run_id)
            await handle.signal(
                RunMessages.APPROVE.kept_signal,
                ApproveInput(
                    action_hash=pending.action_hash,
                    by="maria",
                    role="approver",
                    edit={"max_tokns": 5000},
                ),
            )
            await asyncio.sleep(1)  # the signal's workflow task has run
            state = await ops.status(client, begun.run_id)
            assert state.pending_approval is not None, "nothing changed"
            decided = await ops.approve(
                client, begun.run_id, by="maria", role="approver", edit={"max_tokens": 10**6}
            )
            assert decided.decision == "approved"
            result = await asyncio.wait_for(
                client.get_workflow_handle_for(AgentRunWorkflow.run, begun.run_id).result(), 60
            )
    assert result.status == RunStatus.COMPLETED
    [refused] = await rows(
        pool,
        "SELECT data FROM events WHERE run_id = %s AND type = 'approval.refused'",
        begun.run_id,
    )
    assert "invalid budget edit" in refused["data"]["reason"]
    receipt = await ops.receipt(pool, begun.run_id)
    assert [a["edit"] for a in receipt["approvals"]] == [{"max_tokens": 10**6}]


# ---------------------------------------------------------------- effects keyed by what they are


def flaky_post(posts: list[str], fail_on: set[int]) -> Tool:
    """An external tool (its effect does not share the ledger's transaction) whose
    connection drops after the request went out, on the calls numbered in `fail_on`."""

    async def post_webhook(args: Note, ctx: ToolContext) -> dict[str, str]:
        posts.append(args.text)
        if len(posts) in fail_on:
            raise ConnectionResetError("connection reset after the request was sent")
        return {"posted": args.text}

    return Tool("post_webhook", "post", Note, post_webhook, side_effect=True, transactional=False)


POST = [("post_webhook", {"text": "hello"})]


async def test_a_call_proposed_again_after_an_unknown_outcome_finds_the_same_ledger_row(
    client, settings, pool
):
    """#9: the model heard "failed", proposed the same call again under a new key, and the
    effect happened twice. The key now comes from the call's content."""
    posts: list[str] = []
    registry = ToolRegistry([*agentledger.demo.registry.tools(), flaky_post(posts, {1})])
    spec = make_spec(
        "post it",
        allowed_tools=["post_webhook"],
        failures={"tools": {"post_webhook": {"max_attempts": 1}}},
    )
    with OfflineModelServer(scripted(POST, POST, SUMMARY)) as model:
        async with running_worker(
            client, settings, pool, registry=registry, base_url=model.base_url
        ):
            begun = await ops.start_run(client, spec, task_queue=settings.task_queue)
            pending = await wait_pending(client, begun.run_id)
            assert pending.kind == "unknown_outcome", "asked, not repeated"
            await ops.reject(client, begun.run_id, by="li", role="approver", reason="it landed")
            result = await asyncio.wait_for(
                client.get_workflow_handle_for(AgentRunWorkflow.run, begun.run_id).result(), 60
            )
    assert result.status == RunStatus.COMPLETED
    assert posts == ["hello"], "the effect happened once"
    keys = await rows(pool, "SELECT status FROM tool_ledger WHERE run_id = %s", begun.run_id)
    assert keys == [{"status": "done"}]


async def test_an_unknown_outcome_nobody_decided_stays_unknown(client, settings, pool):
    """#8: an expired unknown-outcome approval was recorded as "happened (person)"."""
    posts: list[str] = []
    registry = ToolRegistry([*agentledger.demo.registry.tools(), flaky_post(posts, {1})])
    spec = make_spec("post it", allowed_tools=["post_webhook"], approval={"timeout_seconds": 2})
    with OfflineModelServer(scripted(POST, SUMMARY)) as model:
        async with running_worker(
            client, settings, pool, registry=registry, base_url=model.base_url
        ):
            result = await run_to_end(client, spec, settings.task_queue)
    assert result.status == RunStatus.FAILED
    assert "unknown and nobody decided" in (result.error or "")
    [row] = await rows(
        pool, "SELECT status, reconciliation FROM tool_ledger WHERE run_id = %s", result.run_id
    )
    assert row == {"status": "started", "reconciliation": None}, "no verdict was invented"
    receipt = await ops.receipt(pool, result.run_id)
    assert any("is unknown" in u for u in receipt["unresolved"])
    assert posts == ["hello"]


async def test_a_rerun_that_dies_again_asks_again(client, settings, pool):
    """#8: a person's "rerun" covered every later attempt: one that died mid-effect again
    was re-run without asking."""
    posts: list[str] = []
    registry = ToolRegistry([*agentledger.demo.registry.tools(), flaky_post(posts, {1, 2})])
    spec = make_spec("post it", allowed_tools=["post_webhook"])
    with OfflineModelServer(scripted(POST, SUMMARY)) as model:
        async with running_worker(
            client, settings, pool, registry=registry, base_url=model.base_url
        ):
            begun = await ops.start_run(client, spec, task_queue=settings.task_queue)
            first = await wait_pending(client, begun.run_id)
            assert first.kind == "unknown_outcome"
            await ops.approve(client, begun.run_id, by="li", role="approver")  # "run it"

            async def asked_again() -> Any:
                pending = (await ops.status(client, begun.run_id)).pending_approval
                return pending if pending and pending.approval_id != first.approval_id else None

            second = await eventually(asked_again, what="a second question")
            assert second.kind == "unknown_outcome"
            assert posts == ["hello", "hello"], "the re-run died; it was not run a third time"
            await ops.reject(client, begun.run_id, by="li", role="approver", reason="it landed")
            result = await asyncio.wait_for(
                client.get_workflow_handle_for(AgentRunWorkflow.run, begun.run_id).result(), 60
            )
    assert result.status == RunStatus.COMPLETED
    assert posts == ["hello", "hello"]


async def test_a_backlog_task_tried_again_does_not_repeat_its_side_effect(client, settings, pool):
    """#7: idempotency keys held the run id, and each attempt of a backlog task is a new
    run: a task that failed after its effect repeated the effect on its next attempt."""
    from agentledger.core.backlog_models import PolicyPatch
    from tests import client_ops as bops
    from tests.backlog_support import end_backlog, item, new_agent, wait_states

    done: list[str] = []

    async def note_once(args: Note, ctx: ToolContext) -> dict[str, str]:
        done.append(args.text)
        return {"noted": args.text}

    note = Tool("note_once", "note", Note, note_once, side_effect=True)
    registry = ToolRegistry([*agentledger.demo.registry.tools(), note])
    # Every attempt makes the same call, then gives an answer verification refuses.
    turns = scripted([("note_once", {"text": "invoice 7"})], "no summary here")
    agent = new_agent()
    task = item(
        "twice",
        allowed_tools=["note_once"],
        max_attempts=2,
        verify={"required_sections": ["## Summary"], "max_rounds": 1},
    )
    try:
        with OfflineModelServer(turns) as model:
            async with running_worker(
                client, settings, pool, registry=registry, base_url=model.base_url
            ):
                await bops.enqueue(
                    client,
                    agent,
                    [task],
                    task_queue=settings.task_queue,
                    policy=PolicyPatch(retry_delay_seconds=0),
                )
                await wait_states(pool, agent, {"twice": "failed"}, seconds=60)
    finally:
        await end_backlog(client, agent)
    assert done == ["invoice 7"], "the second attempt found the first one's ledger row"
    ledger = await rows(
        pool, "SELECT duplicates_prevented FROM tool_ledger WHERE run_id LIKE %s", f"run-{agent}.%"
    )
    assert ledger == [{"duplicates_prevented": 1}]


# ---------------------------------------------------------------- what the record says


async def test_a_tool_step_that_used_up_its_attempts_records_how_many(client, settings, pool):
    """#12: a failed tool step was recorded as attempt 1 whatever it took."""

    async def always_breaks(args: Note, ctx: ToolContext) -> dict[str, str]:
        raise RuntimeError("the service is down")

    breaks = Tool("always_breaks", "break", Note, always_breaks)
    registry = ToolRegistry([*agentledger.demo.registry.tools(), breaks])
    spec = make_spec(
        "try it",
        allowed_tools=["always_breaks"],
        failures={"tools": {"always_breaks": {"max_attempts": 3}}},
    )
    turns = scripted([("always_breaks", {"text": "x"})], SUMMARY)
    with OfflineModelServer(turns) as model:
        async with running_worker(
            client, settings, pool, registry=registry, base_url=model.base_url
        ):
            result = await run_to_end(client, spec, settings.task_queue)
            state = await ops.status(client, result.run_id)
    [step] = [s for s in state.steps if s.type == "tool_call"]
    assert step.status == "failed" and step.attempt == 3
    [row] = await rows(
        pool,
        "SELECT attempt FROM steps WHERE run_id = %s AND step_id = %s",
        result.run_id,
        step.step_id,
    )
    assert row["attempt"] == 3


async def test_the_judge_counts_toward_the_runs_tokens_and_budget(client, settings, pool, worker):
    """#10: an LLM judge's tokens were neither counted nor budgeted."""

    def model(request: dict[str, Any]) -> Any:
        if request.get("response_format"):
            return completion(request, content='{"pass": true, "reason": "fine"}')
        return completion(request, content=SUMMARY)

    spec = make_spec("Say hello", allowed_tools=[], verify={"judge": {"rubric": "Be brief."}})
    with OfflineModelServer(model) as server:
        async with worker(base_url=server.base_url):
            result = await run_to_end(client, spec, settings.task_queue)
    journal = await rows(
        pool,
        "SELECT tokens_in, tokens_out FROM model_journal WHERE run_id = %s",
        result.run_id,
    )
    receipt = await ops.receipt(pool, result.run_id)
    assert receipt["tokens_in"] == sum(j["tokens_in"] for j in journal)
    assert receipt["tokens_out"] == sum(j["tokens_out"] for j in journal)
    [verify] = await rows(
        pool, "SELECT tokens_in FROM steps WHERE run_id = %s AND type = 'verify'", result.run_id
    )
    assert verify["tokens_in"] > 0


async def update_admitted(client: Client, run_id: str, update_id: str) -> None:
    """Until the server holds the update for the run's next workflow task: only then does a
    worker that starts get it in one activation with the cancel (a loaded machine may send
    the update's request late)."""
    request = PollWorkflowExecutionUpdateRequest(
        namespace=client.namespace,
        update_ref=UpdateRef(
            workflow_execution=WorkflowExecution(workflow_id=run_id), update_id=update_id
        ),
        identity=client.identity,
        wait_policy=WaitPolicy(
            lifecycle_stage=UpdateWorkflowExecutionLifecycleStage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_ADMITTED
        ),
    )
    for _ in range(300):
        try:
            await client.workflow_service.poll_workflow_execution_update(
                request, timeout=timedelta(seconds=5)
            )
            return
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
        await asyncio.sleep(0.1)
    raise AssertionError(f"the server never admitted update {update_id}")
