"""Holes an audit found in "nothing lost, nothing twice", each shown closed on the real stack.

Each test is named after the promise it keeps; the audit's number is in its docstring.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import DeleteWorkflowExecutionRequest
from temporalio.service import RPCError, RPCStatusCode

import agentrun_demo
from agentrun import operations as ops
from agentrun.db import RESERVED_CONNECTIONS, open_pool
from agentrun.mirror_store import MirrorStore
from agentrun.models import MirrorBatch, RunResult, RunSnapshot
from agentrun.offline_model import OfflineModelServer, completion
from agentrun.states import RunStatus
from agentrun.tools import Tool, ToolContext, ToolRegistry
from tests.conftest import running_worker
from tests.support import eventually, make_spec, rows, scripted
from workflows import AgentRunWorkflow

SUMMARY = "## Summary\nDone."
NUL = "\x00"


async def run_to_end(client: Any, spec: Any, task_queue: str, seconds: float = 60) -> RunResult:
    started = await ops.start_run(client, spec, task_queue=task_queue)
    handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
    return await asyncio.wait_for(handle.result(), seconds)  # type: ignore[no-any-return]


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
        reply.body["usage"] = {"prompt_tokens": 60_000_000, "completion_tokens": 0}
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
    """#11: every slot's tool held a connection in its transaction and waited for a second
    (its checkpoint): a pool smaller than the slots deadlocked into PoolTimeout."""
    started_calls = 0

    async def note_slowly(args: Note, ctx: ToolContext) -> dict[str, str]:
        nonlocal started_calls
        started_calls += 1
        await asyncio.sleep(1)  # holding the transaction's connection, as slow tools do
        await ctx.save_checkpoint({"noted": args.text})
        await ctx.conn.execute("SELECT 1")
        return {"noted": args.text}

    slow = Tool("note_slowly", "note", Note, note_slowly, side_effect=True)
    registry = ToolRegistry([*agentrun_demo.registry.tools(), slow])
    small = await open_pool(database_url, max_size=RESERVED_CONNECTIONS + 2)
    turns = scripted([("note_slowly", {"text": "hi"})], SUMMARY)
    try:
        with OfflineModelServer(turns) as model:
            async with running_worker(
                client, settings, small, registry=registry, base_url=model.base_url
            ) as running:
                assert running.config()["max_concurrent_activities"] == 2
                specs = [make_spec("note it", allowed_tools=["note_slowly"]) for _ in range(8)]
                results = await asyncio.gather(
                    *(run_to_end(client, s, settings.task_queue, 120) for s in specs)
                )
        assert all(r.status == RunStatus.COMPLETED for r in results)
        failed = await rows(
            small,
            "SELECT error FROM step_attempts WHERE run_id = ANY(%s) AND status <> 'succeeded'",
            [r.run_id for r in results],
        )
        assert failed == [], "no attempt timed out waiting for a connection"
        assert started_calls == 8
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
