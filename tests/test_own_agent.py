"""A user's own agent, as a user runs it: their tools module and their MCP server, in a folder
outside the package, served by `worker.py --tools ... --mcp ...` in its own process.

The runs use a scripted model; the worker reaches it over HTTP like any provider.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

import agentledger
from agentledger.dev.offline_model import OfflineModelServer, Reply, completion
from agentledger.profiles import load_agents
from agentledger.store import tool_sets
from tests.support import eventually, rows, wait_pending

ROOT = Path(__file__).resolve().parent.parent

TOOLS_MODULE = '''
import asyncio
from pathlib import Path

from pydantic import BaseModel, Field

from agentledger import ToolContext, ToolRegistry, tool

HERE = Path(__file__).parent
CHARGES = """CREATE TABLE IF NOT EXISTS my_charges (
    idempotency_key text PRIMARY KEY, run_id text NOT NULL, cents int NOT NULL)"""


class Charge(BaseModel):
    customer: str
    cents: int = Field(gt=0)


@tool(side_effect=True, schema=[CHARGES])
async def charge(args: Charge, ctx: ToolContext) -> dict:
    """Charge a customer's card."""
    await ctx.conn.execute(
        "INSERT INTO my_charges VALUES (%s, %s, %s)", (ctx.idempotency_key, ctx.run_id, args.cents)
    )
    (HERE / "charging").touch()
    while (HERE / "hold").exists():  # the test holds an attempt here to kill its worker
        await asyncio.sleep(0.1)
    return {"charged": args.cents, "customer": args.customer}


registry = ToolRegistry([charge])
'''

MCP_SERVER = """
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

LOG = Path(__file__).parent / "notes_calls.log"
server = MCPServer("notes")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def lookup(topic: str) -> str:
    \"\"\"Look up the team's note on a topic.\"\"\"
    with LOG.open("a") as log:
        log.write(f"lookup {topic}\\n")
    return f"Refunds over $100 need a manager ({topic})."


@server.tool(annotations=ToolAnnotations(destructiveHint=True))
def delete_note(name: str) -> dict:
    \"\"\"Delete a note for good.\"\"\"
    with LOG.open("a") as log:
        log.write(f"delete {name}\\n")
    return {"deleted": name}


if __name__ == "__main__":
    server.run()
"""

INSTRUCTIONS = "You are Helper, the test agent: use your tools, then answer with a ## Summary."
PROFILES = f"""
helper:
  instructions: "{INSTRUCTIONS}"
  tools: [charge, notes__lookup, notes__delete_note]
  timeouts: {{heartbeat_seconds: 2, initial_retry_seconds: 0.2}}
"""

SCRIPTS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "Look up": [("notes__lookup", {"topic": "refunds"})],
    "Delete": [("notes__delete_note", {"name": "old-policy"})],
    "Charge": [("charge", {"customer": "ana", "cents": 500})],
}


def by_task(request: dict[str, Any]) -> Reply:
    """One tool call chosen by the task's first words, then a final answer."""
    task = next(m["content"] for m in request["messages"] if m["role"] == "user")
    if any(m["role"] == "tool" for m in request["messages"]):
        return completion(request, content=f"## Summary\nDone: {task}")
    return completion(request, tool_calls=next(v for k, v in SCRIPTS.items() if task.startswith(k)))


@pytest.fixture
def user_folder(tmp_path: Path) -> Path:
    (tmp_path / "my_tools.py").write_text(TOOLS_MODULE)
    (tmp_path / "notes_server.py").write_text(MCP_SERVER)
    (tmp_path / "agents.yaml").write_text(PROFILES)
    return tmp_path


@pytest.fixture
async def start_worker(
    settings: Any, user_folder: Path, model: OfflineModelServer
) -> AsyncIterator[Callable[[], Any]]:
    """Start `worker.py` processes with the user's tools and MCP server; stopped after."""
    folder = user_folder
    started: list[asyncio.subprocess.Process] = []

    async def start() -> asyncio.subprocess.Process:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]),
            "TEMPORAL_ADDRESS": settings.temporal_address,
            "DATABASE_URL": settings.database_url,
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": "test",
            "AGENTLEDGER_TASK_QUEUE": settings.task_queue,
        }
        log = (folder / f"worker-{len(started)}.log").open("w")
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "worker.py",
            "--tools",
            "my_tools:registry",
            "--mcp",
            f"notes={sys.executable} {folder / 'notes_server.py'}",
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=log,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 20)
            except TimeoutError:
                process.kill()
                await process.wait()


@pytest.fixture
def model() -> Any:
    with OfflineModelServer(by_task) as server:
        yield server


async def test_a_users_tools_and_mcp_server_keep_every_guarantee(
    settings, pool, user_folder, start_worker, model
):
    helper = load_agents(str(user_folder / "agents.yaml"))["helper"]
    calls = user_folder / "notes_calls.log"
    first = await start_worker()
    await eventually(
        lambda: tool_sets.served_tools(pool, settings.task_queue), seconds=60, what="the worker"
    )
    assert await tool_sets.served_tools(pool, settings.task_queue) == [
        "charge",
        "notes__delete_note",
        "notes__lookup",
    ]
    run_client = await agentledger.RunClient.connect(settings)
    try:
        # A read-only MCP tool runs at once.
        looked_up = (await run_client.runs.start("Look up the refund policy.", agent=helper)).run_id
        assert (await run_client.runs.result(looked_up)).status.value == "completed"
        assert calls.read_text() == "lookup refunds\n"

        # A destructive one waits for a person, then runs once.
        deleted = (
            await run_client.runs.start("Delete the old refund policy.", agent=helper)
        ).run_id
        pending = await wait_pending(run_client.client, deleted, seconds=60)
        assert pending.tool == "notes__delete_note" and pending.arguments == {"name": "old-policy"}
        assert "delete" not in calls.read_text()
        await run_client.runs.approve(deleted, by="maria", role="approver")
        assert (await run_client.runs.result(deleted)).status.value == "completed"
        assert calls.read_text().count("delete old-policy") == 1

        # A side-effecting Python tool whose worker is killed mid-step runs once.
        (user_folder / "hold").touch()
        charged = (await run_client.runs.start("Charge ana for her order.", agent=helper)).run_id
        await eventually(
            lambda: asyncio.to_thread((user_folder / "charging").exists),
            seconds=60,
            what="the charge to be under way",
        )
        first.kill()
        await first.wait()
        (user_folder / "hold").unlink()
        await start_worker()
        assert (await run_client.runs.result(charged)).status.value == "completed"
        ledger = await rows(
            pool, "SELECT status, attempt FROM tool_ledger WHERE run_id = %s", charged
        )
        assert ledger == [{"status": "done", "attempt": 2}], "the second attempt did it, once"
        assert await rows(pool, "SELECT cents FROM my_charges WHERE run_id = %s", charged) == [
            {"cents": 500}
        ]

        receipts = {
            run: await run_client.runs.receipt(run) for run in (looked_up, deleted, charged)
        }
    finally:
        await run_client.close()

    for receipt in receipts.values():
        assert receipt.agent == "helper"
        assert receipt.profile_hash == helper.profile_hash()
    assert receipts[looked_up].side_effects == []
    [deletion] = receipts[deleted].side_effects
    assert (deletion.tool, deletion.ok, deletion.output) == (
        "notes__delete_note",
        True,
        {"deleted": "old-policy"},
    )
    assert receipts[deleted].approvals[0].by == "maria"
    [charge] = receipts[charged].side_effects
    assert (charge.tool, charge.ok) == ("charge", True)
    assert charge.output == {"charged": 500, "customer": "ana"}
    mirrored = await rows(pool, "SELECT agent, profile_hash FROM runs WHERE run_id = %s", charged)
    assert mirrored == [{"agent": "helper", "profile_hash": helper.profile_hash()}]

    # The profile's instructions are the system message the model received, every time.
    systems = [r["messages"][0] for r in model.requests]
    assert systems and all(m == {"role": "system", "content": INSTRUCTIONS} for m in systems)
