"""The dev server's own pace: a workflow of N no-op activities, one after another, on bare
Temporal (no agentledger), on the bench's embedded stack with the server's default dispatch reads
and with the stack's (`agentledger.dev.stack.DISPATCH_FLAGS`), side by side. With the default,
the history service reads the tasks bound for matching at most 20 times a second, so once a
burst of reads is spent every dispatch waits about 50 ms: a run's steps slow after its first
dozen, and a second run on the same queue is slow from its first.

    python -m bench.server_pace              # 40 steps, then a second workflow on the same queue
    python -m bench.server_pace --steps 100 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import tempfile
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Worker

from agentledger.dev.stack import EmbeddedStack, free_port
from bench.stats import fmt


@activity.defn
async def noop(n: int) -> int:
    return n


@workflow.defn(sandboxed=False)
class NoopSteps:
    @workflow.run
    async def run(self, steps: int) -> None:
        for i in range(steps):
            await workflow.execute_activity(noop, i, start_to_close_timeout=timedelta(seconds=30))


async def step_gaps(client: Client, workflow_id: str) -> list[float]:
    """Milliseconds between consecutive completed activities, from the history."""
    done = [
        e.event_time.ToMilliseconds()
        async for e in client.get_workflow_handle(workflow_id).fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
    ]
    return [float(b - a) for a, b in itertools.pairwise(done)]


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


async def measure(steps: int, fast_dispatch: bool) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="agentledger-pace-"))
    stack = EmbeddedStack(
        home=home,
        temporal_port=free_port(),
        ui_port=free_port(),
        ui=False,
        fast_dispatch=fast_dispatch,
    )
    endpoints = await asyncio.to_thread(stack.start)
    try:
        client = await Client.connect(endpoints["temporal_address"])
        queue = f"pace-{uuid.uuid4().hex[:8]}"
        out: dict[str, Any] = {"steps": steps, "fast_dispatch": fast_dispatch, "workflows": []}
        # Eager activities would skip matching; the server's pace is in matching.
        async with Worker(
            client,
            task_queue=queue,
            workflows=[NoopSteps],
            activities=[noop],
            disable_eager_activity_execution=True,
        ):
            for label in ("first workflow on a new queue", "second workflow, same queue"):
                workflow_id = f"{queue}-{len(out['workflows'])}"
                await client.execute_workflow(
                    NoopSteps.run, steps, id=workflow_id, task_queue=queue
                )
                gaps = await step_gaps(client, workflow_id)
                out["workflows"].append(
                    {
                        "label": label,
                        "gaps_ms": gaps,
                        "first_10_ms": mean(gaps[:10]),
                        "steps_11_20_ms": mean(gaps[10:20]),
                        "last_10_ms": mean(gaps[-10:]),
                    }
                )
        return out
    finally:
        await asyncio.to_thread(stack.stop)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    servers = {
        "the server's default (20 reads a second)": asyncio.run(measure(args.steps, False)),
        "the embedded stack's (DISPATCH_FLAGS)": asyncio.run(measure(args.steps, True)),
    }
    for server, out in servers.items():
        print(server)
        for each in out["workflows"]:
            first, after, last = (
                fmt(each[k], " ms") for k in ("first_10_ms", "steps_11_20_ms", "last_10_ms")
            )
            print(
                f"  {each['label']}: time per step, first 10 steps {first}, next 10 {after}, "
                f"last 10 {last}"
            )
            print("    each step (ms):", " ".join(f"{g:.0f}" for g in each["gaps_ms"]))
    default, fast = (out["workflows"][0]["last_10_ms"] for out in servers.values())
    print(f"last 10 steps of the first workflow, the stack's ÷ the default: {fast / default:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(servers, indent=2) + "\n")


if __name__ == "__main__":
    main()
