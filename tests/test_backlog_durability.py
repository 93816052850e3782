"""A backlog survives a worker killed mid-task and is shared safely by several workers.

The 40-item test is the AFK promise: a worker dies with SIGKILL during item 12; another worker
takes over; items 1 to 11 are not run again, item 12 resumes in the same run from its
checkpoint, every message is sent once, and all 40 finish in order.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from contextlib import AsyncExitStack
from typing import Any

from pydantic import BaseModel
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

import agentledger.demo
from agentledger import Reconciled, ToolContext, ToolRegistry, tool
from agentledger.core import faults
from agentledger.core.backlog_models import PolicyPatch
from agentledger.core.errors import OperationError
from agentledger.dev.offline_model import OfflineModelServer
from tests import client_ops as bops
from tests import client_ops as ops
from tests.backlog_support import (
    assert_ran_in_order,
    end_backlog,
    item,
    new_agent,
    runs,
    step_attempts,
    tasks,
    wait_all_done,
)
from tests.conftest import running_worker
from tests.support import eventually, rows, scripted
from tests.test_crash_recovery import start_worker_process

ITEM = re.compile(r"item (\d+)")
MESSAGE_ITEMS = {3, 12, 25}  # these send a message: the side effects to count
KILLED_DURING = 12
DOCUMENTS = [f"doc-{i}" for i in range(6)]


def turns_for(n: int) -> list[Any]:
    """What the model does for item n: maybe look up, send and index; then answer."""
    turns: list[Any] = []
    if n == KILLED_DURING:
        turns.append([("search_notes", {"query": f"order item {n}"})])
    if n in MESSAGE_ITEMS:
        turns.append(
            [
                (
                    "send_message",
                    {"to": f"owner{n}@example.com", "subject": f"item {n}", "body": "ok"},
                )
            ]
        )
    if n == KILLED_DURING:
        docs = {"documents": DOCUMENTS, "seconds_per_document": 0.3}
        turns.append([("index_documents", docs)])
    # send_message's own check: an answer must report what was sent.
    sent = "\n\n## Actions\n- Sent a message to the owner." if n in MESSAGE_ITEMS else ""
    turns.append(f"## Summary\nItem {n} is done.{sent}")
    return turns


def backlog_model(request: dict[str, Any]) -> Any:
    task = next(m["content"] for m in request["messages"] if m["role"] == "user")
    match = ITEM.search(task)
    assert match, task
    return scripted(*turns_for(int(match.group(1))))(request)


async def approve_messages(client: Client, pool: Any, agent: str) -> None:
    """The person on call: approves each message a task wants to send, once."""
    decided: set[str] = set()
    while True:
        waiting = await rows(
            pool,
            "SELECT run_id FROM runs WHERE run_id LIKE %s AND status = 'waiting_for_approval'",
            f"run-{agent}.%",
        )
        for run in waiting:
            if run["run_id"] in decided:
                continue
            try:
                await ops.approve(client, run["run_id"], by="night-owl", role="approver")
            except OperationError:
                continue  # the mirror ran ahead of the run, or behind it: look again
            decided.add(run["run_id"])
        await asyncio.sleep(0.1)


async def test_forty_items_survive_a_worker_killed_during_item_12(client, settings, pool, worker):
    agent = new_agent("afk")
    keys = [f"item-{n:02d}" for n in range(1, 41)]
    plan = [item(k, f"Backlog item {n}", allowed_tools=None) for n, k in enumerate(keys, 1)]
    policy = PolicyPatch(retry_delay_seconds=0, continue_as_new_after=10)
    with OfflineModelServer(backlog_model) as model:
        approver = asyncio.create_task(approve_messages(client, pool, agent))
        doomed = await start_worker_process(
            settings.model_copy(update=dict(openai_base_url=model.base_url)), "doomed"
        )
        try:
            added = await bops.enqueue(
                client, agent, plan, task_queue=settings.task_queue, policy=policy
            )
            # The worker process may still be starting: then the plan is held in the backlog's
            # history and applied by the first worker to poll, and all 40 are counted either way.
            assert sorted(added.added + added.held) == keys
            # Item 12 is indexing, its progress saved document by document: kill the worker.
            twelve = await eventually(
                lambda: rows(
                    pool,
                    """SELECT run_id, step_checkpoint FROM backlog_now WHERE agent = %s
                       AND task_key = 'item-12' AND step_name = 'index_documents'
                       AND jsonb_array_length(step_checkpoint->'indexed') >= 2""",
                    agent,
                ),
                seconds=60,
                what="item 12 half way through its documents",
            )
            doomed.kill()
            await doomed.wait()
            before = await tasks(pool, agent)
            async with worker(base_url=model.base_url):
                done = await wait_all_done(pool, agent, 40, seconds=90)
                # Three continues-as-new later, the plan is still known: enqueueing is a no-op.
                again = await bops.enqueue(client, agent, plan, task_queue=settings.task_queue)
        finally:
            approver.cancel()
            if doomed.returncode is None:
                doomed.kill()
                await doomed.wait()
            await end_backlog(client, agent)

    # Before the kill: 1-11 done, 12 running, the rest not started.
    assert [t["state"] for t in before[:11]] == ["done"] * 11
    assert before[11]["state"] == "running" and before[11]["run_id"] == twelve[0]["run_id"]
    assert all(t["state"] == "todo" and t["run_id"] is None for t in before[12:])

    # After: every item done once, in order; item 12 in the same run it started in.
    assert [t["task_key"] for t in done] == keys
    assert all(t["launches"] == 1 and t["attempts"] == 0 for t in done)
    assert done[11]["run_id"] == twelve[0]["run_id"] == f"run-{agent}.item-12.1"
    started = await runs(pool, agent)
    assert all(r["status"] == "completed" for r in started)
    assert_ran_in_order(started, keys)

    # Nothing finished was redone: items 1 to 11 ran on the doomed worker alone, and the step
    # in flight at the kill ran again, from its checkpoint. Another attempt of a step is
    # Temporal's retry of one that missed its heartbeat (a worker starved on a loaded
    # machine, for the tasks' 2 s): legitimate, it starts no completed step again, and the
    # mirror accepts the last attempt. What must not repeat, effects, is counted below.
    steps = await step_attempts(pool, agent)
    assert all(s["status"] == "completed" and s["final"] for s in steps)
    assert all(s["accepted"] == s["last"] for s in steps), "no late attempt overwrote a step"
    first_eleven = {t["run_id"] for t in done[:11]}
    assert {w for s in steps if s["run_id"] in first_eleven for w in s["workers"]} == {"doomed"}
    twelve = [s for s in steps if s["run_id"] == done[11]["run_id"]]
    assert [s["last"] > 1 for s in twelve if s["name"] == "index_documents"] == [True]
    index = await rows(
        pool,
        "SELECT output FROM steps WHERE run_id = %s AND name = 'index_documents'",
        done[11]["run_id"],
    )
    assert index[0]["output"]["indexed"] == len(DOCUMENTS)
    assert index[0]["output"]["resumed_from_checkpoint"] >= 2, "resumed from its checkpoint"
    # ... and each item asked the model once per turn, again only in a retried attempt.
    asked = Counter(
        int(ITEM.search(next(m["content"] for m in r["messages"] if m["role"] == "user")).group(1))
        for r in model.requests
    )
    retried = Counter(
        int(s["run_id"].split(".")[1].removeprefix("item-"))
        for s in steps
        for _ in range(s["last"] - 1)
        if s["type"] == "model_call"
    )
    assert set(asked) == set(range(1, 41))
    for n in range(1, 41):
        assert len(turns_for(n)) <= asked[n] <= len(turns_for(n)) + retried[n], n

    # Every side effect happened once.
    sent = await rows(
        pool,
        "SELECT run_id, idempotency_key FROM outbox WHERE run_id LIKE %s ORDER BY run_id",
        f"run-{agent}.%",
    )
    assert [s["run_id"] for s in sent] == [f"run-{agent}.item-{n:02d}.1" for n in (3, 12, 25)]
    assert len({s["idempotency_key"] for s in sent}) == 3
    # The backlog continued as new every 10 tasks, carrying what it needs.
    head = await rows(pool, "SELECT generation FROM backlogs WHERE agent = %s", agent)
    assert head[0]["generation"] >= 3
    assert (again.added, len(again.ignored), again.total) == ([], 40, 40)


# The outside world of the pair test's one side effect: each courier booked, by parcel. Both
# workers run in the test's process, so whichever books one books it here.
BOOKED: Counter[str] = Counter()


class Parcel(BaseModel):
    parcel: str


async def find_booking(args: Parcel, ctx: ToolContext) -> Reconciled:
    """The courier's answer to "did you book this one?", for an attempt that died mid-effect."""
    return Reconciled(happened=BOOKED[args.parcel] > 0, result={"parcel": args.parcel})


@tool(side_effect=True, risk="medium", transactional=False, reconcile=find_booking)
async def book_courier(args: Parcel, ctx: ToolContext) -> dict[str, object]:
    """Book a courier for a parcel: an effect outside Postgres, counted where it lands."""
    BOOKED[args.parcel] += 1
    return {"parcel": args.parcel, "booked": True}


COURIERS = ToolRegistry([*agentledger.demo.registry.tools(), book_courier])
# Longer than the tasks' heartbeat timeout (FAST_TIMEOUTS): each booking's first attempt is
# lost to Temporal, which starts another, while the first still runs.
ZOMBIE_SECONDS = 3.5


async def test_two_workers_on_one_agent_never_run_a_task_twice(client, settings, pool):
    """Two workers serve one agent's backlog: each task runs once and its side effect lands
    once, even when a step's attempts overlap.

    What may happen twice is an attempt of a step, and the test makes it happen: Temporal
    starts a step's activity again when the attempt before it misses its heartbeat (here a
    booking's first attempt hangs past its timeout, deaf to cancellation; under a loaded CI
    machine, any step whose worker gets no CPU for the 2 s of FAST_TIMEOUTS, a model call
    say). Both attempts may do their work; the promise is about what lands: one run per task,
    one effect per side-effecting call (the ledger's lock and record fence the other attempt
    off), and each step's accepted attempt its last (an earlier attempt's late claim or
    report is fenced off). A count of attempts would count Temporal's retries, not effects."""
    agent = new_agent("pair")
    keys = [f"t{n}" for n in range(1, 10)]
    # The first three tasks, side by side, each book a courier; the others only look up.
    parcels = {k: f"{agent}/{k}" for k in keys[:3]}
    plan = [
        item(
            k,
            f"call book_courier {json.dumps({'parcel': parcels[k]})}",
            allowed_tools=["book_courier"],
        )
        if k in parcels
        else item(k)
        for k in keys
    ]
    target = settings.temporal_address
    clients = [
        await Client.connect(target, data_converter=pydantic_data_converter, identity=name)
        for name in ("worker-a", "worker-b")
    ]
    faults.install(faults.FaultPlan.parse("tool.zombie:book_courier", ZOMBIE_SECONDS))
    try:
        async with AsyncExitStack() as stack:
            for each in clients:
                await stack.enter_async_context(
                    running_worker(each, settings, pool, registry=COURIERS)
                )
            # Two people enqueue the same plan at once, through different workers' clients.
            results = await asyncio.gather(
                *(
                    bops.enqueue(
                        each,
                        agent,
                        plan,
                        task_queue=settings.task_queue,
                        policy=PolicyPatch(parallelism=3, retry_delay_seconds=0),
                    )
                    for each in clients
                )
            )
            done = await wait_all_done(pool, agent, len(keys), seconds=60)
    finally:
        faults.install(faults.FaultPlan())
        await end_backlog(client, agent)

    assert sorted(len(r.added) for r in results) == [0, 9], "one backlog, each task added once"
    assert [t["task_key"] for t in done] == keys
    assert all(t["launches"] == 1 and t["attempts"] == 0 for t in done), "each task ran once"
    started = await runs(pool, agent)
    assert sorted(r["run_id"] for r in started) == sorted(f"run-{agent}.{k}.1" for k in keys)

    # Every side effect landed once, whichever attempt made it, and the ledger recorded it.
    assert {p: BOOKED[p] for p in parcels.values()} == dict.fromkeys(parcels.values(), 1)
    ledger = await rows(
        pool,
        "SELECT run_id, status FROM tool_ledger WHERE run_id LIKE %s ORDER BY run_id",
        f"run-{agent}.%",
    )
    assert ledger == [{"run_id": f"run-{agent}.{k}.1", "status": "done"} for k in parcels]

    # Each step's accepted attempt is its last; an earlier one may have run too.
    steps = await step_attempts(pool, agent)
    assert all(s["status"] == "completed" and s["final"] for s in steps)
    assert all(s["accepted"] == s["last"] for s in steps), "no late attempt overwrote a step"
    assert any(s["name"] == "book_courier" and s["last"] > 1 for s in steps), (
        "a booking's attempts overlapped: the case the fences are for"
    )
    workers = {w for s in steps for w in s["workers"]}
    assert workers == {"worker-a", "worker-b"}, "both workers served"
    # Up to three side by side, never more.
    events = sorted(
        [(r["created_at"], 1) for r in started] + [(r["finished_at"], -1) for r in started]
    )
    running = peak = 0
    for _, change in events:
        running += change
        peak = max(peak, running)
    assert 1 < peak <= 3
