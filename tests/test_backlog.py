"""An agent's backlog: idempotent enqueue, order, stop and resume, poison tasks, retry."""

from __future__ import annotations

import pytest

from agentledger.core.backlog_models import PolicyPatch
from agentledger.core.errors import OperationError
from agentledger.dev.offline_model import OfflineModelServer, offline_planner
from agentledger.workflows import AgentRunWorkflow
from agentledger.workflows.changes import for_new_run
from tests import client_ops as bops
from tests.backlog_support import (
    assert_ran_in_order,
    end_backlog,
    item,
    new_agent,
    runs,
    tasks,
    wait_all_done,
    wait_states,
)
from tests.support import eventually, rows, scripted

NO_DELAY = PolicyPatch(retry_delay_seconds=0)
# Verification that no answer passes: the run fails, every time, for the same reason.
POISON = {"verify": {"required_sections": ["## Never there"], "max_rounds": 1}}
SLOW_INDEX = [("index_documents", {"documents": ["a", "b", "c", "d"], "seconds_per_document": 0.4})]


async def test_enqueue_again_is_a_noop_and_new_tasks_go_to_the_end(client, settings, pool, worker):
    agent = new_agent()
    first = [item("a"), item("b"), item("c")]
    try:
        async with worker():
            added = await bops.enqueue(
                client, agent, first, task_queue=settings.task_queue, policy=NO_DELAY
            )
            again = await bops.enqueue(client, agent, first, task_queue=settings.task_queue)
            more = await bops.enqueue(
                client,
                agent,
                [item("c"), item("d"), item("e")],
                task_queue=settings.task_queue,
            )
            done = await wait_all_done(pool, agent, 5)
            state = await bops.state(client, agent)
    finally:
        await end_backlog(client, agent)

    assert (added.added, added.ignored) == (["a", "b", "c"], [])
    assert (again.added, again.ignored, again.total) == ([], ["a", "b", "c"], 3)
    assert (more.added, more.ignored, more.total) == (["d", "e"], ["c"], 5)
    assert [(t["ordinal"], t["task_key"]) for t in done] == list(enumerate("abcde", start=1))
    assert all(t["launches"] == 1 and t["attempts"] == 0 for t in done)
    assert [t.state for t in state.tasks] == ["done"] * 5
    started = await runs(pool, agent)
    assert all(r["status"] == "completed" for r in started)
    assert_ran_in_order(started, list("abcde"))
    # The mirror keeps what each task asked for, and the backlog's policy.
    spec = await rows(
        pool, "SELECT spec->>'task' AS task FROM backlog_tasks WHERE agent = %s", agent
    )
    assert sorted(s["task"] for s in spec) == [
        f"Summarize the order policy. ({k})" for k in "abcde"
    ]
    head = await rows(pool, "SELECT status, policy FROM backlogs WHERE agent = %s", agent)
    assert head[0]["status"] == "active" and head[0]["policy"]["retry_delay_seconds"] == 0


async def test_stop_pauses_the_running_task_and_resume_continues_it(client, settings, pool, worker):
    def model(request):
        task = next(m["content"] for m in request["messages"] if m["role"] == "user")
        if "Index" in task:
            return scripted(SLOW_INDEX, "## Summary\nIndexed.")(request)
        return offline_planner(request)

    agent = new_agent()
    plan = [item("slow", "Index the documents", allowed_tools=None), item("next"), item("last")]
    try:
        with OfflineModelServer(model) as server:
            async with worker(base_url=server.base_url):
                await bops.enqueue(client, agent, plan, task_queue=settings.task_queue)
                await eventually(
                    lambda: rows(
                        pool,
                        "SELECT 1 FROM backlog_now WHERE agent = %s AND step_name = "
                        "'index_documents'",
                        agent,
                    ),
                    what="the slow task in its tool step",
                )
                stopped = await bops.stop(client, agent)
                assert stopped.stopped and stopped.tasks == ["slow"]
                # The tool step in flight finishes; the run then pauses at its next boundary.
                now = await eventually(
                    lambda: rows(
                        pool,
                        "SELECT task_key, state, run_status, checkpoint FROM backlog_now "
                        "WHERE agent = %s AND run_status = 'paused'",
                        agent,
                    ),
                    what="the slow task's run paused",
                )
                assert now == [
                    {
                        "task_key": "slow",
                        "state": "paused",
                        "run_status": "paused",
                        "checkpoint": {"indexed": ["a", "b", "c", "d"]},
                    }
                ]
                state = await bops.state(client, agent)
                assert state.stopped and [t.state for t in state.tasks] == [
                    "paused",
                    "todo",
                    "todo",
                ]
                with pytest.raises(OperationError, match="already stopped"):
                    await bops.stop(client, agent)

                resumed = await bops.resume(client, agent)
                assert not resumed.stopped and resumed.tasks == ["slow"]
                with pytest.raises(OperationError, match="is not stopped"):
                    await bops.resume(client, agent)
                await wait_all_done(pool, agent, 3)
    finally:
        await end_backlog(client, agent)

    started = await runs(pool, agent)
    assert_ran_in_order(started, ["slow", "next", "last"])
    slow = started[0]["run_id"]
    assert slow == f"run-{agent}.slow.1", "resumed, not started again"
    steps = await rows(
        pool, "SELECT name, attempt FROM steps WHERE run_id = %s AND type = 'tool_call'", slow
    )
    assert steps == [{"name": "index_documents", "attempt": 1}], "finished work is not redone"
    events = [
        e["type"]
        for e in await rows(pool, "SELECT type FROM events WHERE run_id = %s ORDER BY seq", slow)
    ]
    assert events.index("run.paused") < events.index("run.resumed")


async def test_a_poison_task_is_dead_lettered_while_the_rest_finish(client, settings, pool, worker):
    agent = new_agent()
    plan = [item("ok1"), item("poison", **POISON), item("ok2")]
    try:
        async with worker():
            await bops.enqueue(client, agent, plan, task_queue=settings.task_queue, policy=NO_DELAY)
            final = await wait_states(
                pool, agent, {"ok1": "done", "poison": "failed", "ok2": "done"}
            )
            dead = await bops.dead_letters(pool, agent)
            poison_runs = [r for r in await runs(pool, agent) if ".poison." in r["run_id"]]

            with pytest.raises(OperationError, match="no task 'nope'"):
                await bops.retry(client, agent, "nope")
            with pytest.raises(OperationError, match="ok1 is done"):
                await bops.retry(client, agent, "ok1")
            retried = await bops.retry(client, agent, "poison")
            assert retried.state == "todo" and "back in the backlog" in retried.message
            await eventually(
                lambda: rows(
                    pool,
                    "SELECT 1 FROM backlog_dead_letters WHERE agent = %s AND run_id LIKE %s",
                    agent,
                    "%.poison.6",
                ),
                what="the retried task dead-lettered again after three more runs",
            )
    finally:
        await end_backlog(client, agent)

    by_key = {t["task_key"]: t for t in final}
    assert by_key["poison"]["attempts"] == 3 and by_key["poison"]["launches"] == 3
    assert by_key["ok1"]["launches"] == by_key["ok2"]["launches"] == 1
    assert [r["status"] for r in poison_runs] == ["failed"] * 3
    assert [(d["task_key"], d["attempts"], d["max_attempts"]) for d in dead] == [("poison", 3, 3)]
    assert "verification failed" in dead[0]["last_error"]
    assert dead[0]["run_id"] == f"run-{agent}.poison.3"
    # ok2 waited its turn: it started after the poison task's last attempt.
    started = await runs(pool, agent)
    assert [r["run_id"].split(".", 1)[1] for r in started[:5]] == [
        "ok1.1",
        "poison.1",
        "poison.2",
        "poison.3",
        "ok2.1",
    ]
    assert len([r for r in started if ".poison." in r["run_id"]]) == 6


async def test_on_poison_stop_stops_the_backlog_until_resumed(client, settings, pool, worker):
    agent = new_agent()
    plan = [item("poison", max_attempts=1, **POISON), item("after")]
    policy = PolicyPatch(on_poison="stop", retry_delay_seconds=0)
    try:
        async with worker():
            await bops.enqueue(client, agent, plan, task_queue=settings.task_queue, policy=policy)
            await eventually(
                lambda: rows(
                    pool, "SELECT 1 FROM backlogs WHERE agent = %s AND status = 'stopped'", agent
                ),
                what="the backlog stopped by its policy",
            )
            listing = await bops.list_tasks(pool, agent)
            assert "poison failed 1 times" in listing["stop_reason"]
            assert [(t["task_key"], t["state"]) for t in listing["tasks"]] == [
                ("poison", "failed"),
                ("after", "todo"),
            ]
            assert [r["run_id"] for r in await runs(pool, agent)] == [f"run-{agent}.poison.1"]
            await bops.resume(client, agent)
            await wait_states(pool, agent, {"after": "done"})
    finally:
        await end_backlog(client, agent)
    assert [t["state"] for t in await tasks(pool, agent)] == ["failed", "done"]


async def test_a_terminated_backlog_starts_again_from_the_mirror(client, settings, pool, worker):
    agent = new_agent()
    try:
        async with worker():
            with pytest.raises(OperationError, match="share the idempotency key 'a'"):
                await bops.enqueue(
                    client, agent, [item("a"), item("a")], task_queue=settings.task_queue
                )
            await bops.enqueue(
                client, agent, [item("a"), item("b")], task_queue=settings.task_queue
            )
            await wait_all_done(pool, agent, 2)
            await end_backlog(client, agent)  # someone terminates the workflow
            with pytest.raises(OperationError, match="is terminated"):
                await bops.stop(client, agent)
            again = await bops.enqueue(
                client, agent, [item("a"), item("b"), item("c")], task_queue=settings.task_queue
            )
            done = await wait_all_done(pool, agent, 3)
    finally:
        await end_backlog(client, agent)
    assert (again.added, again.ignored) == (["c"], ["a", "b"])
    assert [(t["ordinal"], t["task_key"], t["launches"]) for t in done] == [
        (1, "a", 1),
        (2, "b", 1),
        (3, "c", 1),
    ]
    assert len(await runs(pool, agent)) == 3, "a and b were not run again"


async def test_an_attempt_whose_run_id_is_taken_is_not_started_again(
    client, settings, pool, worker
):
    """Workflow-id uniqueness is the guard: an id already used is never a second start."""
    agent = new_agent()
    taken = f"run-{agent}.k.1"
    try:
        async with worker():
            await client.execute_workflow(
                AgentRunWorkflow.run,
                for_new_run(item("k").spec),
                id=taken,
                task_queue=settings.task_queue,
            )
            await bops.enqueue(
                client, agent, [item("k")], task_queue=settings.task_queue, policy=NO_DELAY
            )
            final = await wait_states(pool, agent, {"k": "done"})
    finally:
        await end_backlog(client, agent)
    assert (final[0]["launches"], final[0]["run_id"]) == (2, f"run-{agent}.k.2")
    assert "already exists" in final[0]["last_error"]
