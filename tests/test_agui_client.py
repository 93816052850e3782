"""AG-UI as its own clients read it: the official TypeScript client (`@ag-ui/client` from
npm, the one CopilotKit front ends use, pinned in tests/agui_client/package-lock.json) runs
a thread against `agentledger serve` to its approval interrupt with a runner's key, resumes
it with an approver's key and an edit, and reads the run to RUN_FINISHED, with the
client's own event verification on (tests/agui_client/drive.mjs). The receipt shows the
edit, decided by the approver's key."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

import agentledger.demo
from agentledger.core.config import AgentLedgerConfig
from agentledger.store import tool_sets
from tests import client_ops
from tests.http_support import make_key, served
from tests.support import NOTIFY_TASK, rows
from tests.test_agui import AGENT, identity, tenant_name
from tests.test_cli import ROOT

CLIENT = ROOT / "tests" / "agui_client"
NODE_SECONDS = 120.0


async def npm_ci() -> None:
    """The client's packages as the lock file pins them (CI runs this in .ci/run)."""
    npm = shutil.which("npm")
    assert npm is not None, "node is installed without npm: install npm to run this test"
    proc = await asyncio.create_subprocess_exec(
        npm, "ci", "--no-audit", "--no-fund", cwd=CLIENT, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), 300)
    assert proc.returncode == 0, f"`npm ci` in {CLIENT} failed: {out.decode()}"


async def drive(url: str, runner: str, approver: str, edit: dict[str, Any]) -> dict[str, Any]:
    node = shutil.which("node")
    assert node is not None
    proc = await asyncio.create_subprocess_exec(
        node, "drive.mjs", url, runner, approver, NOTIFY_TASK, json.dumps(edit), cwd=CLIENT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), NODE_SECONDS)
    assert proc.returncode == 0, f"the AG-UI client failed: {err.decode()}"
    told: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return told


async def test_the_official_agui_client_runs_a_thread_through_an_approval_with_an_edit(
    settings: AgentLedgerConfig, pool: AsyncConnectionPool, worker: Any, tmp_path: Path
) -> None:
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the official AG-UI client runs on node 20 or later")
    if not (CLIENT / "node_modules" / "@ag-ui" / "client").is_dir():
        await npm_ci()
    tenant = tenant_name()
    runner = await make_key(settings, tenant, "runner")
    approver = await make_key(settings, tenant, "approver")
    await tool_sets.join(pool, settings.task_queue, "w", agentledger.demo.registry.names())
    edit = {"body": "Edited by the official AG-UI client."}
    try:
        async with worker(), served(settings, tmp_path) as door:
            told = await drive(f"{door.url}/v1/agents/{AGENT}/agui", runner, approver, edit)
    finally:
        await tool_sets.leave(pool, settings.task_queue, "w")
    first, second = told["first"], told["second"]
    assert first["events"][0] == "RUN_STARTED" and first["errors"] == []
    assert first["finished"]["outcome"] == "interrupt"
    interrupt = told["interrupt"]
    assert interrupt["reason"] == "tool_approval" and interrupt["responseSchema"]
    assert second["errors"] == [] and second["finished"]["outcome"] == "success"
    assert second["events"][-1] == "RUN_FINISHED" and told["pendingAfter"] == []
    run_id = told["result"]["run_id"]
    assert run_id == f"run-{tenant}~agui.{told['threadId']}"
    receipt = await client_ops.receipt(pool, run_id)
    [approval] = receipt["approvals"]
    assert approval["by"] == identity(approver) and approval["edit"] == edit
    assert receipt["outcome"] == "completed"
    outbox = await rows(pool, "SELECT body FROM outbox WHERE run_id = %s", run_id)
    assert outbox == [{"body": edit["body"]}]
