"""`starter.py watch`: a run followed live from its start to its receipt; a late joiner sees
the same sequence; an ended run's story comes from the mirror; streams outlive a crash."""

from __future__ import annotations

import asyncio
import json
import os
import sys

from agentrun import operations as ops
from agentrun import watch
from agentrun.models import WatchItem
from tests.support import make_spec, rows, wait_pending
from tests.test_cli import ROOT, run_cli
from workflows import AgentRunWorkflow


async def watch_cli(settings, home, run_id: str) -> asyncio.Task[tuple[int, list[WatchItem]]]:
    """`starter.py watch RUN --json` in its own process; returns once it has printed its first
    line, with a task that collects the rest (so the test acts only once it is following)."""
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": settings.temporal_address,
        "DATABASE_URL": settings.database_url or "",
        "AGENTRUN_TASK_QUEUE": settings.task_queue,
        "AGENTRUN_HOME": str(home),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "starter.py",
        "watch",
        run_id,
        "--json",
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    first = await asyncio.wait_for(proc.stdout.readline(), 60)

    async def rest() -> tuple[int, list[WatchItem]]:
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        lines = [first, *out.splitlines()]
        return proc.returncode, [WatchItem.model_validate_json(line) for line in lines]

    return asyncio.create_task(rest())


async def follow(client, pool, run_id, **kwargs) -> list[WatchItem]:
    return [item async for item in watch.watch(client, run_id, pool=pool, **kwargs)]


def check_story(items: list[WatchItem]) -> None:
    """Every event once and in order, the stream's offsets whole, steps in order, receipt."""
    live = [i for i in items if i.kind != "receipt"]
    assert [i.offset for i in live] == list(range(len(live)))
    events = [i for i in live if i.kind == "event"]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[0].type == "run.started" and events[-1].type == "run.finished"
    finished = [e.step_id for e in events if e.type.startswith("step.")]
    assert finished == sorted(finished)
    assert items[-1].kind == "receipt" and items[-1].data["outcome"] == "completed"


async def test_watch_json_follows_a_run_to_its_receipt_and_a_late_joiner_sees_the_same(
    client, settings, pool, worker, tmp_path
):
    async with worker():
        started = await ops.start_run(client, make_spec(), task_queue=settings.task_queue)
        cli = await watch_cli(settings, tmp_path, started.run_id)
        pending = await wait_pending(client, started.run_id)
        late = asyncio.create_task(follow(client, pool, started.run_id))  # joins at the gate
        await asyncio.sleep(0.5)
        await ops.approve(client, started.run_id, by="li", role="approver")
        code, items = await cli
        late_items = await late

    assert code == 0
    assert items[0].offset == 0  # followed live, from the start
    check_story(items)
    assert late_items == items
    mirrored = await rows(
        pool, "SELECT seq, type FROM events WHERE run_id = %s ORDER BY seq", started.run_id
    )
    assert [(i.seq, i.type) for i in items if i.kind == "event"] == [
        (r["seq"], r["type"]) for r in mirrored
    ]
    requested = next(i for i in items if i.type == "approval.requested")
    assert requested.data["tool"] == pending.tool == "send_message"
    types = [i.type for i in items]
    assert types.index("approval.requested") < types.index("approval.approved")


async def test_watching_an_ended_run_prints_its_story_from_the_mirror(
    client, settings, pool, worker, tmp_path
):
    spec = make_spec(task="Look up our refund policy.")
    async with worker():
        started = await ops.start_run(client, spec, task_queue=settings.task_queue)
        await client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id).result()
    # No worker now: the story comes from Postgres alone.
    result = await run_cli(settings, tmp_path, "watch", started.run_id, "--json")
    assert result.code == 0, result.err
    items = [json.loads(line) for line in result.out.splitlines()]
    assert all(i["offset"] is None for i in items)
    assert items[0]["type"] == "run.started" and items[-1]["kind"] == "receipt"
    text = await run_cli(settings, tmp_path, "watch", started.run_id)
    assert "run.finished" in text.out and "receipt: completed" in text.out


async def test_watch_refuses_unknown_runs_and_bad_offsets(client, settings, tmp_path):
    result = await run_cli(settings, tmp_path, "watch", "run-nope", "--json")
    assert result.code == 2 and "no run 'run-nope'" in result.err
    result = await run_cli(settings, tmp_path, "watch", "run-nope", "--from", "-1")
    assert result.code == 2 and "--from" in result.err
