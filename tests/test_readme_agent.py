"""README "Your agent in five minutes", command for command, on the files in examples/my_agent.

The commands are read from the README itself, so the section cannot drift from what works.
Only `starter.py up` is left out: the test's own Temporal, Postgres and offline model stand in
for it, through the same environment variables the stack file would provide.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path

from temporalio.client import Client

from agentledger.dev.offline_model import OfflineModelServer, offline_planner
from agentledger.store import tool_sets
from agentledger.temporal.worker_presence import pollers_or_unknown
from tests import client_ops as ops
from tests.support import eventually, rows, wait_pending


async def polling(client: Client, task_queue: str) -> bool:
    now = datetime.now(UTC)
    return any(p.fresh(now) for p in await pollers_or_unknown(client, task_queue, seconds=5))


ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Your agent in five minutes", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip()[:1] != "#"]


async def shell(line: str, env: dict[str, str]) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        line,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode()


async def test_the_readme_agent_runs_as_written(client, settings, pool, tmp_path):
    commands = readme_commands()
    assert commands[0] == "python starter.py up --no-worker"
    worker_line, start, status, approve, receipt = commands[1:]
    assert worker_line.startswith("PYTHONPATH=examples/my_agent python worker.py --tools")
    run_id = "run-refund-42"

    with OfflineModelServer(offline_planner) as model:
        env = {
            **os.environ,
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
            "AGENTLEDGER_HOME": str(tmp_path),
            "TEMPORAL_ADDRESS": settings.temporal_address,
            "DATABASE_URL": settings.database_url,
            "OPENAI_BASE_URL": model.base_url,
            "AGENTLEDGER_TASK_QUEUE": settings.task_queue,
        }
        log = (tmp_path / "worker.log").open("w")
        worker = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            worker_line,
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=log,
            start_new_session=True,  # its own process group: stopped whole, as Ctrl-C would
        )
        try:
            await eventually(
                lambda: tool_sets.served_tools(pool, settings.task_queue),
                seconds=60,
                what="the worker to start",
            )
            # Its tools are recorded before it polls; `start` warns until it has polled.
            await eventually(
                lambda: polling(client, settings.task_queue), seconds=60, what="its first poll"
            )
            code, out = await shell(start, env)
            assert code == 0, out
            assert out.startswith(f"{run_id} started"), out
            await wait_pending(client, run_id, seconds=60)
            code, out = await shell(status, env)
            assert code == 0 and "waiting for approval" in out and "refund(" in out, out
            code, out = await shell(approve, env)
            assert code == 0 and "approved" in out, out
            handle = client.get_workflow_handle(run_id)
            await asyncio.wait_for(handle.result(), 60)
            code, out = await shell(receipt, env)
        finally:
            if worker.returncode is None:
                os.killpg(worker.pid, signal.SIGTERM)
            await asyncio.wait_for(worker.wait(), 30)

    assert code == 0, out
    assert "**Outcome:** completed" in out
    assert "**Agent:** refunds (profile " in out
    assert re.search(r"- refund `[^`]+`: ok", out), out
    receipt_json = await ops.receipt(pool, run_id)
    assert [s["name"] for s in receipt_json["steps"] if s["type"] == "tool_call"] == [
        "orders__lookup_order",
        "refund",
    ]
    assert receipt_json["approvals"][0]["by"] == "you"
    assert await rows(pool, "SELECT order_id, cents FROM refunds WHERE run_id = %s", run_id) == [
        {"order_id": 42, "cents": 1999}
    ]
    # The model was told the profile's instructions, and offered the profile's tools.
    first = model.requests[0]
    assert first["messages"][0]["content"].startswith("You handle refund requests.")
    assert sorted(t["function"]["name"] for t in first["tools"]) == [
        "orders__lookup_order",
        "refund",
    ]
