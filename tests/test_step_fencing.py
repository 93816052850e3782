"""Checkpoints survive a failed attempt; a zombie attempt can never overwrite a final step."""

from __future__ import annotations

import asyncio
import uuid

from pydantic import BaseModel
from temporalio import activity

import agentledger.demo
from agentledger.dev.offline_model import OfflineModelServer
from agentledger.store.mirror_store import MirrorStore
from agentledger.tools import Tool, ToolContext, ToolRegistry
from tests import client_ops as ops
from tests.support import eventually, make_spec, mirror_batch, rows, run_result, scripted


class Docs(BaseModel):
    documents: list[str]


async def crashes_once_midway(args: Docs, ctx: ToolContext) -> dict[str, object]:
    """Index documents; the first attempt fails after two, as if the worker fell over."""
    resumed = list(ctx.checkpoint.get("indexed", []))
    done = list(resumed)
    for doc in args.documents:
        if doc in done:
            continue
        if activity.info().attempt == 1 and len(done) == 2:
            raise RuntimeError("worker fell over mid-step")
        done.append(doc)
        await ctx.save_checkpoint({"indexed": done})
    return {"resumed_with": resumed, "indexed": done}


class Lookup(BaseModel):
    key: str


async def zombie_on_first_attempt(args: Lookup, ctx: ToolContext) -> dict[str, object]:
    """Attempt 1 outlives its timeout, ignores cancellation, and reports late."""
    attempt = activity.info().attempt
    if attempt == 1:
        try:
            await asyncio.sleep(3)
        except asyncio.CancelledError:
            await asyncio.sleep(2)
    return {"attempt": attempt}


REGISTRY = ToolRegistry(
    [
        *agentledger.demo.registry.tools(),
        Tool("crashy_index", "index documents", Docs, crashes_once_midway),  # type: ignore[arg-type]
        Tool("zombie_lookup", "look something up", Lookup, zombie_on_first_attempt),  # type: ignore[arg-type]
    ]
)


async def run_to_end(client, settings, worker, model, spec):
    async with worker(registry=REGISTRY, base_url=model.base_url):
        started = await ops.start_run(client, spec, task_queue=settings.task_queue)
        return started.run_id, await run_result(client, started.run_id)


async def test_a_retried_step_resumes_from_its_checkpoint(client, settings, pool, worker):
    docs = {"documents": ["a", "b", "c", "d"]}
    with OfflineModelServer(scripted([("crashy_index", docs)], "## Summary\nok")) as model:
        run_id, result = await run_to_end(client, settings, worker, model, make_spec("index"))

    assert result.status.value == "completed"
    step = (
        await rows(
            pool,
            "SELECT output, attempt, checkpoint FROM steps WHERE run_id = %s AND name = %s",
            run_id,
            "crashy_index",
        )
    )[0]
    assert step["attempt"] == 2
    assert step["output"] == {"resumed_with": ["a", "b"], "indexed": ["a", "b", "c", "d"]}
    run = (await rows(pool, "SELECT checkpoint FROM runs WHERE run_id = %s", run_id))[0]
    assert run["checkpoint"] == {"indexed": ["a", "b", "c", "d"]}, "merged into the run"
    receipt = await ops.receipt(pool, run_id)
    assert any("worker fell over" in r["reason"] for r in receipt["retries"])


async def test_a_late_zombie_attempt_cannot_overwrite_the_accepted_step(
    client, settings, pool, worker
):
    spec = make_spec(
        "look up",
        timeouts={"tool_seconds": 1, "heartbeat_seconds": 5, "initial_retry_seconds": 0.1},
    )
    with OfflineModelServer(scripted([("zombie_lookup", {"key": "k"})], "## Summary\nok")) as model:
        async with worker(registry=REGISTRY, base_url=model.base_url):
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            result = await run_result(client, started.run_id)
            # Let the zombie finish and try its late write while the worker still runs.
            await eventually(
                lambda: rows(
                    pool,
                    "SELECT 1 FROM step_attempts WHERE run_id = %s AND attempt = 1"
                    " AND finished_at IS NOT NULL",
                    started.run_id,
                ),
                seconds=15,
                what="the zombie attempt to report",
            )

    assert result.status.value == "completed"
    step = (
        await rows(
            pool,
            "SELECT output, attempt, status, final FROM steps WHERE run_id = %s AND name = %s",
            started.run_id,
            "zombie_lookup",
        )
    )[0]
    assert step == {"output": {"attempt": 2}, "attempt": 2, "status": "completed", "final": True}


async def test_fencing_rules_in_the_store(pool):
    """The same rules, written directly: stale attempts and finalized rows are refused."""
    store = MirrorStore(pool)
    run_id, step_id = f"run-fence-{uuid.uuid4().hex[:8]}", "0001-tool_call"
    common = {
        "run_id": run_id,
        "step_id": step_id,
        "seq": 1,
        "type": "tool_call",
        "name": "t",
        "worker": "w",
        "lease_seconds": 5,
        "input": {},
    }
    await store.begin_attempt(attempt=2, **common)
    await store.begin_attempt(attempt=1, **common)  # a stale claim loses
    owner = await rows(pool, "SELECT attempt FROM steps WHERE run_id = %s", run_id)
    assert owner == [{"attempt": 2}]
    assert not await store.end_attempt(
        run_id=run_id, step_id=step_id, attempt=1, status="succeeded", output="stale"
    )
    assert await store.end_attempt(
        run_id=run_id, step_id=step_id, attempt=2, status="succeeded", output="fresh"
    )


async def test_a_claim_carries_the_runs_batch_fenced_and_idempotent(pool):
    """The batch a step's activity carries lands with the step's claim; a retried attempt
    re-applies it to no effect, and a stale one that lands after a newer write changes
    nothing (as `mirror.sync` is fenced)."""
    store = MirrorStore(pool)
    run_id = f"run-carry-{uuid.uuid4().hex[:8]}"
    claim = {
        "run_id": run_id,
        "step_id": "0002-tool_call",
        "seq": 2,
        "type": "tool_call",
        "name": "t",
        "worker": "w",
        "lease_seconds": 5,
        "input": {},
    }
    old = mirror_batch(run_id, fence=10, step_seq=1, status="waiting_for_tool")
    await store.begin_attempt(attempt=1, batch=old, **claim)
    await store.begin_attempt(attempt=2, batch=old, **claim)  # a retry carries the same batch

    async def mirror() -> tuple[list[dict], list[dict], list[dict]]:
        run = await rows(pool, "SELECT version, status FROM runs WHERE run_id = %s", run_id)
        steps = await rows(
            pool,
            "SELECT step_id, status, attempt, final, output FROM steps WHERE run_id = %s "
            "ORDER BY seq",
            run_id,
        )
        events = await rows(pool, "SELECT seq, fence FROM events WHERE run_id = %s", run_id)
        return run, steps, events

    run, steps, events = await mirror()
    assert run == [{"version": 10, "status": "waiting_for_tool"}]
    assert steps == [
        {
            "step_id": "0001-tool_call",
            "status": "completed",
            "attempt": 1,
            "final": True,
            "output": {"fence": 10},
        },
        {
            "step_id": "0002-tool_call",
            "status": "running",
            "attempt": 2,
            "final": False,
            "output": None,
        },
    ]
    assert events == [{"seq": 1, "fence": 10}]
    # A newer write lands; then a zombie attempt's claim with the old batch comes late.
    await store.sync(mirror_batch(run_id, fence=20, step_seq=1, status="planning"))
    await store.begin_attempt(attempt=3, batch=old, **claim)
    run, steps, events = await mirror()
    assert run == [{"version": 20, "status": "planning"}]
    assert steps[0]["output"] == {"fence": 20} and steps[1]["attempt"] == 3
    assert events == [{"seq": 1, "fence": 20}]
