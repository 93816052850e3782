"""A quick tool attempt writes its claim, the run's batch and its report in one statement;
a slow one is shown running while it runs; a failing one still reports, and its batch lands
once."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel
from temporalio.testing import ActivityEnvironment

from agentledger.activities.step_claim import QUICK_GRACE_SECONDS
from agentledger.activities.tools import ToolActivities
from agentledger.core.wire import ToolCallInput, ToolCallResult
from agentledger.store.artifacts import ArtifactStore
from agentledger.store.mirror_store import AttemptEnd, MirrorStore
from agentledger.store.vault import SecretVault
from agentledger.tools import Tool, ToolContext, ToolRegistry
from agentledger.tools.registry import ToolError
from tests.support import eventually, mirror_batch, rows, step_claim

STEP = "0002-tool_call"


class Nothing(BaseModel):
    pass


async def noop(args: Nothing, ctx: ToolContext) -> dict[str, Any]:
    return {"ok": True}


async def refuses(args: Nothing, ctx: ToolContext) -> dict[str, Any]:
    raise ToolError("no such page")


async def breaks(args: Nothing, ctx: ToolContext) -> dict[str, Any]:
    raise RuntimeError("worker fell over")


SLOW_STARTED = asyncio.Event()
SLOW_MAY_END = asyncio.Event()


async def slow(args: Nothing, ctx: ToolContext) -> dict[str, Any]:
    SLOW_STARTED.set()
    await SLOW_MAY_END.wait()
    return {"slow": True}


async def sends(args: Nothing, ctx: ToolContext) -> dict[str, Any]:
    return {"sent": True}


REGISTRY = ToolRegistry(
    [
        Tool("noop", "nothing", Nothing, noop),  # type: ignore[arg-type]
        Tool("refuses", "a tool error", Nothing, refuses),  # type: ignore[arg-type]
        Tool("breaks", "an exception", Nothing, breaks),  # type: ignore[arg-type]
        Tool("slow", "waits", Nothing, slow),  # type: ignore[arg-type]
        Tool("sends", "a side effect", Nothing, sends, side_effect=True),  # type: ignore[arg-type]
    ]
)


def claim_of(run_id: str, attempt: int) -> dict[str, Any]:
    return step_claim(run_id, STEP, attempt)


def new_run() -> str:
    return f"run-quick-{uuid.uuid4().hex[:8]}"


async def step_rows(pool: Any, run_id: str) -> tuple[list[dict], list[dict]]:
    steps = await rows(
        pool,
        "SELECT step_id, status, attempt, final, output, error, lease_until IS NULL AS no_lease"
        " FROM steps WHERE run_id = %s ORDER BY seq",
        run_id,
    )
    attempts = await rows(
        pool,
        "SELECT attempt, status, error, finished_at IS NOT NULL AS finished FROM step_attempts"
        " WHERE run_id = %s AND step_id = %s ORDER BY attempt",
        run_id,
        STEP,
    )
    return steps, attempts


async def test_an_ended_claim_writes_claim_batch_and_report_in_one_statement(pool):
    store = MirrorStore(pool)
    run_id = new_run()
    started = datetime.now(UTC) - timedelta(seconds=1)
    ended = AttemptEnd("succeeded", output={"ok": True})
    before = store.group_commit.stats.items
    await store.begin_attempt(
        **claim_of(run_id, 1),
        batch=mirror_batch(run_id, fence=7, step_seq=1),
        end=ended,
        started_at=started,
    )
    assert store.group_commit.stats.items == before + 1
    steps, attempts = await step_rows(pool, run_id)
    assert steps == [
        {
            "step_id": "0001-tool_call",
            "status": "completed",
            "attempt": 1,
            "final": True,
            "output": {"fence": 7},
            "error": None,
            "no_lease": True,
        },
        {
            "step_id": STEP,
            "status": "attempt_succeeded",
            "attempt": 1,
            "final": False,
            "output": {"ok": True},
            "error": None,
            "no_lease": True,
        },
    ]
    assert attempts == [{"attempt": 1, "status": "succeeded", "error": None, "finished": True}]
    timing = await rows(
        pool,
        "SELECT s.started_at AS step, a.started_at AS attempt FROM steps s JOIN step_attempts a"
        " USING (run_id, step_id) WHERE run_id = %s AND step_id = %s",
        run_id,
        STEP,
    )
    assert timing == [{"step": started, "attempt": started}]

    # Written again (a retried write), it changes nothing.
    await store.begin_attempt(
        **claim_of(run_id, 1),
        batch=mirror_batch(run_id, fence=7, step_seq=1),
        end=ended,
        started_at=started,
    )
    assert await step_rows(pool, run_id) == (steps, attempts)


async def test_an_ended_claim_is_fenced_like_a_claim_and_its_report(pool):
    store = MirrorStore(pool)
    run_id = new_run()
    await store.begin_attempt(**claim_of(run_id, 2))
    # A stale attempt that ended late loses to the newer claim; its journal row says so.
    await store.begin_attempt(
        **claim_of(run_id, 1),
        end=AttemptEnd("succeeded", output="stale"),
        started_at=datetime.now(UTC),
    )
    steps, attempts = await step_rows(pool, run_id)
    assert [(s["status"], s["attempt"], s["output"]) for s in steps] == [("running", 2, None)]
    assert [(a["attempt"], a["status"]) for a in attempts] == [(1, "succeeded"), (2, "running")]
    # Once the workflow made the step final, not even the newest attempt's report lands.
    await store.sync(mirror_batch(run_id, fence=9, step_seq=2))
    await store.begin_attempt(
        **claim_of(run_id, 3),
        end=AttemptEnd("failed", error="late"),
        started_at=datetime.now(UTC),
    )
    steps, _ = await step_rows(pool, run_id)
    assert [(s["status"], s["attempt"], s["final"]) for s in steps] == [("completed", 1, True)]


class CountingStore(MirrorStore):
    """The real store, counting the reports written apart from a claim."""

    reports = 0

    async def end_attempt(self, **report: Any) -> bool:
        self.reports += 1
        return await super().end_attempt(**report)


@pytest.fixture
async def tools(pool):
    """The tool activity over the test database, with a store whose writes the test counts."""
    store = CountingStore(pool)
    activities = ToolActivities(
        REGISTRY,
        pool,
        store,
        "test-worker",
        commits=MirrorStore(pool),
        artifacts=ArtifactStore(pool),
        artifact_threshold=1_000_000,
        vault=SecretVault(pool),
    )
    return activities, store


def call(run_id: str, tool: str) -> ToolCallInput:
    return ToolCallInput(
        run_id=run_id,
        step_id=STEP,
        seq=2,
        tool=tool,
        arguments={},
        idempotency_key=f"{run_id}:{STEP}",
        heartbeat_seconds=5,
        mirror=mirror_batch(run_id, fence=7, step_seq=1),
    )


async def test_a_quick_tool_writes_once(pool, tools):
    activities, store = tools
    run_id = new_run()
    before = store.group_commit.stats.items
    result = await ActivityEnvironment().run(activities.invoke, call(run_id, "noop"))
    assert result.ok and result.output == {"ok": True}
    # Claim, batch and report: one write.
    assert (store.group_commit.stats.items, store.reports) == (before + 1, 0)
    steps, attempts = await step_rows(pool, run_id)
    assert [(s["step_id"], s["status"], s["output"]) for s in steps] == [
        ("0001-tool_call", "completed", {"fence": 7}),
        (STEP, "attempt_succeeded", {"ok": True}),
    ]
    assert attempts == [{"attempt": 1, "status": "succeeded", "error": None, "finished": True}]


async def test_a_side_effect_tool_still_claims_before_it_runs(pool, tools):
    activities, store = tools
    run_id = new_run()
    before = store.group_commit.stats.items
    result = await ActivityEnvironment().run(activities.invoke, call(run_id, "sends"))
    assert result.ok
    # The claim went through the group commit; the report came after, on its own.
    assert (store.group_commit.stats.items, store.reports) == (before + 1, 1)
    steps, attempts = await step_rows(pool, run_id)
    assert steps[1]["status"] == "attempt_succeeded"
    assert attempts == [{"attempt": 1, "status": "succeeded", "error": None, "finished": True}]


async def start_slow(
    env: ActivityEnvironment, activities: ToolActivities, run_id: str
) -> asyncio.Task[ToolCallResult]:
    """The slow tool's attempt, once the tool runs."""
    SLOW_STARTED.clear()
    SLOW_MAY_END.clear()
    running = asyncio.create_task(env.run(activities.invoke, call(run_id, "slow")))
    await asyncio.wait_for(SLOW_STARTED.wait(), 10)
    return running


async def test_a_slow_tool_is_shown_running_while_it_runs(pool, tools):
    activities, store = tools
    run_id = new_run()
    running = await start_slow(ActivityEnvironment(), activities, run_id)

    async def shown_running() -> bool:
        steps, _ = await step_rows(pool, run_id)
        return len(steps) == 2 and steps[1]["status"] == "running" and not steps[1]["no_lease"]

    await eventually(shown_running, seconds=QUICK_GRACE_SECONDS + 5, what="the slow step's claim")
    _, attempts = await step_rows(pool, run_id)
    assert attempts == [{"attempt": 1, "status": "running", "error": None, "finished": False}]
    SLOW_MAY_END.set()
    result = await running
    assert result.output == {"slow": True}
    assert store.reports == 1  # the claim was written at the grace, the report at the end
    steps, attempts = await step_rows(pool, run_id)
    assert (steps[1]["status"], steps[1]["output"]) == ("attempt_succeeded", {"slow": True})
    assert attempts == [{"attempt": 1, "status": "succeeded", "error": None, "finished": True}]


async def test_a_quick_tool_error_reports_and_lands_its_batch_once(pool, tools):
    activities, store = tools
    run_id = new_run()
    before = store.group_commit.stats.items
    result = await ActivityEnvironment().run(activities.invoke, call(run_id, "refuses"))
    assert not result.ok and result.error == "no such page"
    assert (store.group_commit.stats.items, store.reports) == (before + 1, 0)
    steps, attempts = await step_rows(pool, run_id)
    assert [(s["status"], s["error"]) for s in steps] == [
        ("completed", None),
        ("attempt_failed", "no such page"),
    ]
    assert attempts == [
        {"attempt": 1, "status": "failed", "error": "no such page", "finished": True}
    ]


async def test_a_quick_tool_that_raises_reports_its_failure(pool, tools):
    activities, store = tools
    run_id = new_run()
    before = store.group_commit.stats.items
    with pytest.raises(RuntimeError, match="worker fell over"):
        await ActivityEnvironment().run(activities.invoke, call(run_id, "breaks"))
    assert (store.group_commit.stats.items, store.reports) == (before + 1, 0)
    steps, attempts = await step_rows(pool, run_id)
    assert steps[1]["status"] == "attempt_failed"
    assert attempts == [
        {
            "attempt": 1,
            "status": "failed",
            "error": "RuntimeError: worker fell over",
            "finished": True,
        }
    ]


async def test_a_quick_attempt_cancelled_before_its_claim_writes_nothing(pool, tools):
    """The run puts the batch of a step that did not complete back for its next write."""
    activities, store = tools
    run_id = new_run()
    env = ActivityEnvironment()  # attempt 1
    before = store.group_commit.stats.items
    running = await start_slow(env, activities, run_id)
    env.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    await asyncio.sleep(QUICK_GRACE_SECONDS * 2)
    assert store.group_commit.stats.items == before
    assert await step_rows(pool, run_id) == ([], [])


async def test_a_retried_steps_attempt_that_left_no_record_is_named(pool):
    """A quick attempt whose worker died before its claim left no row; the receipt's
    retries still name it."""
    store = MirrorStore(pool)
    run_id = new_run()
    await store.begin_attempt(
        **claim_of(run_id, 2),
        end=AttemptEnd("succeeded", output={"ok": True}),
        started_at=datetime.now(UTC),
    )
    [retried] = await store.retries(run_id)
    assert (retried.step_id, retried.attempts) == (STEP, 2)
    assert retried.reason == "attempt 1 left no record"
    assert await store.attempt_outcome(run_id, STEP, 1) == "attempt 1 left no record"
