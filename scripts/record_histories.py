"""Record workflow histories from real runs into tests/histories/, for the replay test.

Run after any intended change to workflow code: `python scripts/record_histories.py`.
It starts its own in-memory Temporal dev server, embedded Postgres and offline model.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import openai
import pgserver
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentrun import operations as ops  # noqa: E402
from agentrun.db import open_pool  # noqa: E402
from agentrun.models import RunSpec  # noqa: E402
from agentrun.offline_model import OfflineModelServer  # noqa: E402
from agentrun.settings import Settings  # noqa: E402
from agentrun.tools.demo import demo_registry  # noqa: E402
from agentrun.worker_factory import WorkerDeps, build_worker  # noqa: E402

OUT = ROOT / "tests" / "histories"
TASK = "Look up our refund policy and notify ana@example.com about it."
Scenario = Callable[[Client, str], Awaitable[None]]


async def wait_pending(client: Client, run_id: str) -> None:
    for _ in range(300):
        if (await ops.status(client, run_id)).pending_approval:
            return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{run_id} never reached its approval gate")


async def approved_with_edit(client: Client, run_id: str) -> None:
    await wait_pending(client, run_id)
    await ops.approve(client, run_id, by="li", role="approver", edit={"body": "Edited."})


async def rejected(client: Client, run_id: str) -> None:
    await wait_pending(client, run_id)
    await ops.reject(client, run_id, by="li", role="approver", reason="wrong customer")


async def paused_and_resumed(client: Client, run_id: str) -> None:
    await wait_pending(client, run_id)
    await ops.pause(client, run_id)
    await ops.approve(client, run_id, by="li", role="approver")
    for _ in range(300):
        if (await ops.status(client, run_id)).status.value == "paused":
            break
        await asyncio.sleep(0.1)
    await ops.resume(client, run_id)


async def cancelled(client: Client, run_id: str) -> None:
    await wait_pending(client, run_id)
    await ops.cancel(client, run_id)


SCENARIOS: dict[str, Scenario] = {
    "approved_with_edit": approved_with_edit,
    "rejected": rejected,
    "paused_and_resumed": paused_and_resumed,
    "cancelled": cancelled,
}


async def main() -> None:
    folder = tempfile.mkdtemp(prefix="agentrun-record-")
    pg = pgserver.get_server(folder, cleanup_mode="delete")
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=shutil.which("temporal"), data_converter=pydantic_data_converter
    )
    pool = await open_pool(pg.get_uri())
    try:
        with OfflineModelServer() as model:
            settings = replace(Settings.load({}), task_queue="record-histories")
            deps = WorkerDeps(
                pool=pool,
                model_client=openai.AsyncOpenAI(
                    base_url=model.base_url, api_key="x", max_retries=0
                ),
                registry=demo_registry(),
            )
            async with build_worker(env.client, settings, deps):
                OUT.mkdir(parents=True, exist_ok=True)
                for name, scenario in SCENARIOS.items():
                    spec = RunSpec(task=TASK, idempotency_key=f"history-{name}")
                    started = await ops.start_run(env.client, spec, task_queue=settings.task_queue)
                    await scenario(env.client, started.run_id)
                    handle = env.client.get_workflow_handle(started.run_id)
                    try:
                        await handle.result()
                    except Exception:  # a cancelled run ends as an error: its history is fine
                        pass
                    history = await handle.fetch_history()
                    (OUT / f"{name}.json").write_text(history.to_json())
                    print(f"recorded {name}: {len(history.events)} events")
    finally:
        await pool.close()
        await env.shutdown()
        pg.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
