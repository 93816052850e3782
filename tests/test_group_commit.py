"""Many runs' mirror writes share one transaction, and one refused batch fails no other."""

from __future__ import annotations

import asyncio
import uuid

from agentledger.store.db import open_pool
from agentledger.store.group_commit import GroupCommit
from agentledger.store.mirror_store import MirrorStore
from tests.support import mirror_batch as batch
from tests.support import rows, step_claim


def new_run() -> str:
    return f"run-group-{uuid.uuid4().hex[:8]}"


async def test_writes_that_arrive_together_commit_as_one_group(pool):
    store = MirrorStore(pool)
    runs = [new_run() for _ in range(20)]
    await asyncio.gather(*(store.sync(batch(run, fence=3)) for run in runs))
    assert (store.group_commit.stats.groups, store.group_commit.stats.items) == (1, 20)
    landed = await rows(
        pool, "SELECT count(*) AS n FROM steps WHERE run_id = ANY(%s) AND final", runs
    )
    assert landed == [{"n": 20}]
    # Alone, a write does not wait for company.
    await store.sync(batch(new_run(), fence=1))
    assert (store.group_commit.stats.groups, store.group_commit.stats.items) == (2, 21)


async def test_one_refused_batch_fails_no_other_in_its_group(pool):
    store = MirrorStore(pool)
    good = [new_run() for _ in range(5)]
    bad = new_run()
    writes = [batch(run, fence=2) for run in good]
    writes.insert(2, batch(bad, fence=2, cost_usd=1e12))  # beyond numeric(14, 6)
    await asyncio.gather(*(store.sync(w) for w in writes))
    assert store.group_commit.stats.fallbacks == 1
    landed = await rows(pool, "SELECT run_id FROM runs WHERE run_id = ANY(%s)", [*good, bad])
    assert {r["run_id"] for r in landed} == set(good)
    # The refused batch is recorded, and the rest of it landed, as when it is written alone.
    failures = await rows(pool, "SELECT target FROM mirror_failures WHERE run_id = %s", bad)
    assert failures == [{"target": "runs"}]
    steps = await rows(pool, "SELECT final FROM steps WHERE run_id = %s", bad)
    assert steps == [{"final": True}]


async def test_a_group_keeps_each_runs_newest_state_whatever_the_order(pool):
    store = MirrorStore(pool)
    run = new_run()
    await asyncio.gather(
        store.sync(batch(run, fence=9, status="completed")),
        store.sync(batch(run, fence=4, status="planning")),  # a stale write, in the same group
    )
    assert store.group_commit.stats.groups == 1
    [row] = await rows(pool, "SELECT status, fence FROM runs WHERE run_id = %s", run)
    assert row == {"status": "completed", "fence": 9}


async def test_the_mirrors_statements_are_prepared_from_their_second_run(database_url):
    pool = await open_pool(database_url, max_size=1)
    try:
        store = MirrorStore(pool)
        for fence in (1, 2):
            await store.sync(batch(new_run(), fence=fence))
        prepared = await rows(pool, "SELECT statement FROM pg_prepared_statements")
    finally:
        await pool.close()
    texts = " ".join(r["statement"] for r in prepared)
    assert "INSERT INTO runs" in texts and "INSERT INTO steps" in texts
    assert "INSERT INTO events" in texts


async def test_claims_that_arrive_together_share_a_group_and_each_gets_its_own_checkpoint(pool):
    store = MirrorStore(pool)
    # The first to arrive sorts last: a group is written in its runs' order, and each claim
    # still gets its own answer back.
    runs = [new_run().replace("group-", "group-z")]
    runs += [new_run().replace("group-", "group-a") for _ in range(3)]

    def claim(run: str, attempt: int) -> dict:
        return step_claim(run, "0009-tool_call", attempt)

    await store.begin_attempt(**claim(runs[0], 1))
    await store.save_step_checkpoint(
        run_id=runs[0], step_id="0009-tool_call", attempt=1, patch={"page": 3}
    )
    before = store.group_commit.stats.groups
    saved = await asyncio.gather(
        store.begin_attempt(**claim(runs[0], 2), batch=batch(runs[0], fence=5)),
        *(store.begin_attempt(**claim(run, 1), batch=batch(run, fence=5)) for run in runs[1:]),
        store.sync(batch(new_run(), fence=5)),
    )
    assert store.group_commit.stats.groups == before + 1
    assert saved == [{"page": 3}, {}, {}, {}, None]
    claimed = await rows(
        pool,
        "SELECT run_id, attempt, status FROM steps WHERE step_id = '0009-tool_call'"
        " AND run_id = ANY(%s) ORDER BY run_id",
        runs,
    )
    assert {(c["run_id"], c["attempt"], c["status"]) for c in claimed} == {
        (runs[0], 2, "running"),
        *((run, 1, "running") for run in runs[1:]),
    }
    landed = await rows(pool, "SELECT count(*) AS n FROM runs WHERE run_id = ANY(%s)", runs)
    assert landed == [{"n": 4}]


async def test_a_write_that_arrives_while_a_group_commits_does_not_wait_for_it():
    """A second writer takes what arrives meanwhile; with one, the quick write would queue."""
    release = asyncio.Event()

    async def write_one(item: str) -> str:
        if item == "slow":
            await release.wait()
        return item

    async def write_group(items: list[str]) -> list[str]:
        return [await write_one(item) for item in items]

    commit: GroupCommit[str, str] = GroupCommit(write_group, write_one)
    slow = asyncio.create_task(commit.submit("slow"))
    await asyncio.sleep(0.05)  # its writer is now inside the slow commit
    assert await asyncio.wait_for(commit.submit("quick"), 5) == "quick"
    assert not slow.done()
    release.set()
    assert await slow == "slow"
