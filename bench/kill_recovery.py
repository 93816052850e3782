"""Recovery after SIGKILL, the same way for every agent: ours, the bare agent and the peers.

Each system gets its own worker and `runs` runs at once, whose first model call the
scripted model holds for HOLD_SECONDS; while every one of them is in flight, the worker is
SIGKILLed and a fresh one started on the same queue. Measured per run: from the kill to the
start of the model call's retried attempt (its ActivityTaskStarted, which history writes
for the attempt that completed). What bounds it is what each system sets as its documented
default: ours heartbeats its steps (`timeouts.heartbeat_seconds`, the bench's --heartbeat),
the bare agent and the peers time an attempt out at its start-to-close timeout (60 s for
a model call in both peers' defaults and in the bare agent).

(`bench/recovery.py` is ours alone, as users run it: `worker.py --demo`, a side effect
behind an approval, and exactly one message after the kill.)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio.client import Client

from agentledger.dev.offline_model import OfflineModelServer, Reply
from bench import harness, ours
from bench.stats import summarize

HOLD_SECONDS = 4.0


def holding(request: dict[str, Any]) -> Reply:
    """The bench's scripted model, which holds the first turn long enough to kill under it."""
    reply = ours.responder(request)
    if not any(m.get("role") == "assistant" for m in request.get("messages", [])):
        reply.delay_seconds = HOLD_SECONDS
    return reply


async def measure(
    client: Client,
    system: str,
    env: dict[str, str],
    start: Callable[[str, str], Awaitable[None]],
    first_activity: str,
    *,
    runs: int,
    budget_seconds: float,
) -> dict[str, Any]:
    """Kill `system`'s worker under `runs` in-flight model calls; time each one's retry."""
    with OfflineModelServer(holding, stream_pause_seconds=0) as model:
        worker_env = {**env, "OPENAI_BASE_URL": model.base_url}
        queue = harness.new_queue(f"{system}-kill")
        doomed = harness.bench_worker(system, queue, worker_env)
        await doomed.start(ready_line="ready")
        ids = [f"{queue}-{i}" for i in range(runs)]
        for workflow_id in ids:
            await start(workflow_id, queue)
        deadline = time.monotonic() + 30
        while len(model.requests) < runs and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)  # the model server is a thread: no event to wait on
        in_flight = len(model.requests)
        os.kill(doomed.pid, signal.SIGKILL)
        killed_at = time.time()
        await doomed.wait_exit(10)
        survivor = harness.bench_worker(system, queue, worker_env)
        retried: list[float] = []
        finished = 0
        async with harness.running(survivor):
            for workflow_id in ids:
                left = max(1.0, budget_seconds - (time.time() - killed_at))
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(client.get_workflow_handle(workflow_id).result(), left)
                    finished += 1
        for workflow_id in ids:
            times = await harness.run_times(client, workflow_id)
            call = next((a for a in times.activities if a.name == first_activity), None)
            if call is not None and call.attempt >= 2 and call.started is not None:
                retried.append(call.started - killed_at)
    return {
        "runs": runs,
        "in_flight_at_kill": in_flight,
        "finished": finished,
        "kill_to_retry_s": summarize(retried),
    }
