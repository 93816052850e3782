"""The mirror is a projection of Temporal's history: it can be checked and re-derived."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel

import agentledger.demo
from agentledger.client import projection
from agentledger.dev.offline_model import OfflineModelServer
from agentledger.tools import Tool, ToolContext, ToolRegistry
from agentledger.workflows import AgentRunWorkflow
from tests import client_ops as ops
from tests.support import closed, eventually, make_spec, rows, scripted, wait_pending

ROOT = Path(__file__).resolve().parent.parent


async def finished_run(client, settings, worker, **fields) -> str:
    spec = make_spec(**fields)
    async with worker():
        started = await ops.start_run(client, spec, task_queue=settings.task_queue)
        await wait_pending(client, started.run_id)
        await ops.approve(client, started.run_id, by="maria", role="approver")
        handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
        assert (await handle.result()).status.value == "completed"
    return started.run_id


async def assert_agrees(client, pool, run_id: str, seconds: float = 30) -> None:
    """The mirror catches up within `seconds`; if not, say which rows differ."""
    report: dict = {}

    async def agrees() -> bool:
        report.update(await ops.check_mirror(client, pool, run_id))
        return report["agrees"]

    try:
        await eventually(agrees, seconds=seconds, what="the mirror to agree with the history")
    except AssertionError as err:
        raise AssertionError("\n".join(report["differences"])) from err


async def test_a_finished_run_agrees_and_every_corruption_is_named(client, settings, pool, worker):
    run_id = await finished_run(client, settings, worker)

    await assert_agrees(client, pool, run_id)
    derived = await projection.project(client, run_id)
    assert derived.closed and derived.receipt is not None
    assert [s.type for s in sorted(derived.steps.values(), key=lambda s: s.seq)][:2] == [
        "model_call",
        "tool_call",
    ]
    tool_step = next(s for s in derived.steps.values() if s.name == "send_message")
    assert tool_step.output, "a tool step's output comes from its accepted result in history"

    # Corrupt the mirror four ways: each shows up, named by kind, table and key.
    async with pool.connection() as conn:
        await conn.execute("DELETE FROM events WHERE run_id = %s AND seq = 3", (run_id,))
        await conn.execute(
            "UPDATE steps SET output = '{\"forged\": true}' WHERE run_id = %s AND step_id = %s",
            (run_id, tool_step.step_id),
        )
        await conn.execute(
            """INSERT INTO steps (run_id, step_id, seq, type, name, status)
               VALUES (%s, '9999-tool_call', 9999, 'tool_call', 'send_message', 'running')""",
            (run_id,),
        )
        await conn.execute("UPDATE runs SET status = 'running' WHERE run_id = %s", (run_id,))
    report = await ops.check_mirror(client, pool, run_id)
    assert not report["agrees"]
    assert report["counts"] == {
        "duplicate": 0,
        "divergent": 2,
        "lost": 1,
        "orphan": 1,
        "unwritable": 0,
    }
    text = "\n".join(report["differences"])
    assert "lost      events[3]" in text
    assert f"divergent steps[{tool_step.step_id}] output" in text
    assert "orphan    steps[9999-tool_call]" in text
    assert "divergent runs" in text and "status" in text

    # Rebuilding from history puts every row back as Temporal accepted it.
    rebuilt = await ops.rebuild_mirror(client, pool, run_id)
    assert rebuilt["agrees"], rebuilt["differences"]
    run = await rows(pool, "SELECT status FROM runs WHERE run_id = %s", run_id)
    assert run == [{"status": "completed"}]
    steps = await rows(
        pool,
        "SELECT output FROM steps WHERE run_id = %s AND step_id = %s",
        run_id,
        tool_step.step_id,
    )
    assert steps[0]["output"] == tool_step.output
    # The attempts journal is not history's to rewrite: it is left as it was.
    attempts = await rows(pool, "SELECT count(*) AS n FROM step_attempts WHERE run_id = %s", run_id)
    assert attempts[0]["n"] > 0


async def test_a_continued_run_is_projected_across_its_chain(client, settings, pool, worker):
    calls = [[("search_notes", {"query": f"refund {i}"})] for i in range(12)]
    # Each search an activity of its own: twelve local ones fit under the limit.
    spec = make_spec(
        "search a lot",
        allowed_tools=["search_notes"],
        history_events_limit=100,
        local_read_only_tools=False,
    )
    with OfflineModelServer(scripted(*calls, "## Summary\nSearched.")) as model:
        async with worker(base_url=model.base_url):
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
            assert (await handle.result()).status.value == "completed"
    histories = await projection.run_histories(client, started.run_id)
    assert len(histories) > 1, "the run continued as new at least once"
    derived = await projection.project(client, started.run_id)
    events = sorted(derived.events)
    assert events == list(range(1, len(events) + 1)), "events from every execution, none twice"
    assert sum(s.type == "tool_call" for s in derived.steps.values()) == 12
    await assert_agrees(client, pool, started.run_id)


async def test_cli_checks_and_refuses_to_rebuild_an_open_run(client, settings, pool, worker):
    env = {
        "TEMPORAL_ADDRESS": settings.temporal_address,
        "DATABASE_URL": settings.database_url,
        "PATH": str(Path(sys.executable).parent),
    }

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "starter.py", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    missing = cli("mirror", "check", "run-nope")
    assert missing.returncode == 3 and "no run 'run-nope'" in missing.stderr

    spec = make_spec()
    async with worker():
        started = await ops.start_run(client, spec, task_queue=settings.task_queue)
        await wait_pending(client, started.run_id)
        refused = cli("mirror", "rebuild", started.run_id)
        assert refused.returncode == 5 and "still running" in refused.stderr
        await ops.cancel(client, started.run_id)
        await eventually(
            lambda: rows(pool, "SELECT 1 FROM receipts WHERE run_id = %s", started.run_id),
            what="the receipt of the cancelled run",
        )
        # The receipt is written first; then the worker delivers the run's own cancel, and
        # only then does Temporal close it. The worker stays up until it has.
        handle = client.get_workflow_handle(started.run_id)
        await eventually(lambda: closed(handle), what="Temporal closing the cancelled run")

    checked = cli("mirror", "check", started.run_id, "--json")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    report = json.loads(checked.stdout)
    assert report["agrees"] and report["open"] is False
    rebuilt = cli("mirror", "rebuild", started.run_id)
    assert rebuilt.returncode == 0 and "agrees with Temporal's history" in rebuilt.stdout


class Nothing(BaseModel):
    pass


async def always_breaks(args: Nothing, ctx: ToolContext) -> None:
    raise RuntimeError("the service is down")


async def test_a_failed_step_activity_hands_its_mirror_batch_to_the_next_write(
    client, settings, pool, worker
):
    """The tool call's one attempt wrote the batch it carried with its claim, then failed.
    History counts only what completed, so the run sends those rows again with its next
    write, and the mirror agrees with history row by row."""
    registry = ToolRegistry(
        [*agentledger.demo.registry.tools(), Tool("breaks", "always fails", Nothing, always_breaks)]
    )
    spec = make_spec("break something", failures={"tools": {"breaks": {"max_attempts": 1}}})
    with OfflineModelServer(scripted([("breaks", {})], "## Summary\nIt broke.")) as model:
        async with worker(registry=registry, base_url=model.base_url):
            started = await ops.start_run(client, spec, task_queue=settings.task_queue)
            handle = client.get_workflow_handle_for(AgentRunWorkflow.run, started.run_id)
            assert (await handle.result()).status.value == "completed"
    [step] = await rows(
        pool,
        "SELECT status, final FROM steps WHERE run_id = %s AND type = 'tool_call'",
        started.run_id,
    )
    assert step == {"status": "failed", "final": True}
    await assert_agrees(client, pool, started.run_id)
