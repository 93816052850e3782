"""Noisy neighbour: tenant A starts many runs at once, then tenant B starts a few.

The same scenario runs twice, on a fresh embedded stack each time: once with the server's
fairness off (every task in one FIFO queue) and once on (tenants take turns). Measured from
each run's Temporal history: start -> first step (the first model call starting) and start
-> close for B's runs, for the same runs on the idle system before A's burst, and for one
priority-1 run started last. Figures are ratios to read side by side: other work shares the
machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from agentledger.core.config import AgentLedgerConfig, SetupError
from agentledger.dev.offline_model import OfflineModelServer
from agentledger.dev.stack import EmbeddedStack, free_port
from agentledger.temporal.client import connect
from bench import harness, ours
from bench.stats import summarize
from tests import client_ops as ops

FIRST_STEP = "model.complete"
TENANT_A, TENANT_B, TENANT_IDLE, TENANT_URGENT = "tenant-a", "tenant-b", "idle", "urgent"
START_CONCURRENCY = 50  # starts in flight at once while tenant A floods the queue


async def first_step_and_close(client: Any, run_id: str) -> tuple[float | None, float | None]:
    """Seconds from the run's start to its first model call starting, and to its close."""
    times = await harness.run_times(client, run_id)
    firsts = [a.started for a in times.of(FIRST_STEP) if a.started is not None]
    first = min(firsts) - times.started if firsts else None
    closed = times.closed - times.started if times.closed is not None else None
    return first, closed


async def start_all(client: Any, queue: str, tenant: str, count: int, priority: int) -> list[str]:
    gate = asyncio.Semaphore(START_CONCURRENCY)

    async def one(i: int) -> str:
        spec = ours.run_spec(1, key=f"{tenant}-{i}").model_copy(
            update={"tenant": tenant, "priority": priority}
        )
        async with gate:
            started = await ops.start_run(client, spec, task_queue=queue)
        return started.run_id

    return list(await asyncio.gather(*(one(i) for i in range(count))))


async def wait_closed(client: Any, run_ids: list[str], within: float) -> None:
    await asyncio.wait_for(
        asyncio.gather(*(client.get_workflow_handle(r).result() for r in run_ids)), within
    )


async def completed_count(client: Any, run_ids: list[str]) -> int:
    done = 0
    for run_id in run_ids:
        description = await client.get_workflow_handle(run_id).describe()
        done += description.close_time is not None
    return done


async def one_mode(fair: bool, *, runs: int, neighbours: int, budget: float) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="agentledger-noisy-"))
    stack = EmbeddedStack(
        home,
        temporal_port=free_port(),
        ui_port=free_port(),
        ui=False,
        fairness=fair,
        fast_dispatch=False,  # the server's defaults, as in bench/run.py
    )
    model = OfflineModelServer(ours.responder)
    try:
        endpoints = await asyncio.to_thread(stack.start)
        model.start()
        env = {
            "TEMPORAL_ADDRESS": endpoints["temporal_address"],
            "DATABASE_URL": endpoints["database_url"],
            "OPENAI_BASE_URL": model.base_url,
            "OPENAI_API_KEY": "bench",
            "AGENTLEDGER_HOME": str(home),
        }
        client = await _connect(AgentLedgerConfig.load(env))
        queue = harness.new_queue("noisy")
        async with harness.running(harness.bench_worker("ours", queue, env)):
            idle = await start_all(client, queue, TENANT_IDLE, neighbours, priority=3)
            await wait_closed(client, idle, budget)
            flood_started = time.monotonic()
            flood = await start_all(client, queue, TENANT_A, runs, priority=3)
            flood_seconds = time.monotonic() - flood_started
            late = await start_all(client, queue, TENANT_B, neighbours, priority=3)
            urgent = await start_all(client, queue, TENANT_URGENT, 1, priority=1)
            await wait_closed(client, late + urgent, budget)
            a_done = await completed_count(client, flood)
            idle_times = [await first_step_and_close(client, r) for r in idle]
            late_times = [await first_step_and_close(client, r) for r in late]
            urgent_first, urgent_close = await first_step_and_close(client, urgent[0])
        return {
            "fairness": fair,
            "flood_start_seconds": flood_seconds,
            "idle_first_step": summarize([f for f, _ in idle_times if f is not None]),
            "idle_completion": summarize([c for _, c in idle_times if c is not None]),
            "b_first_step": summarize([f for f, _ in late_times if f is not None]),
            "b_completion": summarize([c for _, c in late_times if c is not None]),
            "urgent_first_step": urgent_first,
            "urgent_completion": urgent_close,
            "a_done_when_b_done": a_done,
        }
    finally:
        model.stop()
        await asyncio.to_thread(stack.stop)
        shutil.rmtree(home, ignore_errors=True)


async def _connect(settings: AgentLedgerConfig) -> Any:
    deadline = time.monotonic() + 60
    while True:  # the port opens before the frontend is healthy
        try:
            return await connect(settings, identity="bench-noisy")
        except SetupError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


async def noisy_neighbour(*, runs: int, neighbours: int = 5, budget: float = 600) -> dict[str, Any]:
    results: dict[str, Any] = {"runs": runs, "neighbours": neighbours}
    for fair in (False, True):
        key = "on" if fair else "off"
        with contextlib.suppress(TimeoutError):
            results[key] = None
            results[key] = await one_mode(fair, runs=runs, neighbours=neighbours, budget=budget)
    return results
