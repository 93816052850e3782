"""A benchmark worker in its own process, so its memory and CPU are its own.

`python -m bench.worker_proc --kind KIND --task-queue Q` (KIND one of `KINDS`) reads
TEMPORAL_ADDRESS, DATABASE_URL and OPENAI_BASE_URL like `worker.py`; it prints `ready` once
it polls and stops on SIGTERM. `ours` (and `ours_rated` and `ours_remote_tools`, the same worker,
whose runs are of a tenant with a model-call rate, or turn local read-only tools off) is
`agentledger.worker.worker_factory.build_worker` with the benchmark's instant tool;
`bare_agent` and `bare` are plain `temporalio` workers for `bench.bare_agent` and
`bench.bare`, with the same worker tuning (and, for the agent, the same model client);
`openai_agents` and `pydantic_ai` are the peers (bench/openai_agents_peer.py,
bench/pydantic_ai_peer.py), each with its plugin as its docs show, on the same tuning.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import signal
import time
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from agentledger.activities.provider_clients import model_client
from agentledger.core.config import AgentLedgerConfig
from agentledger.temporal.client import connect
from agentledger.worker import garbage_collector
from agentledger.worker.worker_factory import (
    AgentWorkers,
    WorkerDeps,
    build_worker,
    open_worker_pool,
)
from bench.bare import BareWorkflow, noop
from bench.bare_agent import AgentActivities, BareAgentWorkflow
from bench.ours import bench_registry

KINDS = [
    "ours",
    "ours_rated",
    "ours_remote_tools",
    "bare_agent",
    "bare",
    "openai_agents",
    "pydantic_ai",
]


def bare_options() -> dict[str, Any]:
    """The worker settings `build_worker` uses, so bare Temporal runs on the same ones."""
    try:
        from agentledger.worker.worker_factory import worker_tuning
    except ImportError:  # a worker factory without explicit tuning: Temporal's defaults
        return {"max_concurrent_activities": 100}
    options: dict[str, Any] = dict(worker_tuning(AgentLedgerConfig.load().workflow_cache))
    options.pop("workflow_runner", None)  # the sandbox passthrough list names our modules
    return options


async def serve(kind: str, task_queue: str, identity: str, stop: asyncio.Event) -> None:
    settings = AgentLedgerConfig.load()
    client = await connect(settings, identity=identity)
    pool = None
    worker: AgentWorkers | Worker
    if kind in ("ours", "ours_rated", "ours_remote_tools"):  # one worker; the runs differ
        pool = await open_worker_pool(settings)
        deps = WorkerDeps(pool=pool, model_client=model_client(settings), registry=bench_registry())
        worker = build_worker(client, settings, deps, task_queue=task_queue)
    elif kind == "bare_agent":
        activities = AgentActivities(model_client(settings))
        worker = Worker(
            client,
            task_queue=task_queue,
            workflows=[BareAgentWorkflow],
            activities=[activities.complete, activities.invoke],
            **bare_options(),
        )
    elif kind == "openai_agents":
        from bench import openai_agents_peer as peer

        # As its docs show: the plugin on the client, which the worker inherits.
        client = await Client.connect(
            settings.temporal_address,
            namespace=settings.temporal_namespace,
            identity=identity,
            plugins=[peer.plugin(os.environ.get("OPENAI_BASE_URL"))],
        )
        worker = Worker(
            client,
            task_queue=task_queue,
            workflows=[peer.OpenAIAgentsWorkflow, peer.OpenAIAgentsLongWorkflow],
            activities=[peer.bench_noop, peer.bench_page],
            **bare_options(),
        )
    elif kind == "pydantic_ai":
        from pydantic_ai.durable_exec.temporal import AgentPlugin, PydanticAIPlugin

        from bench import pydantic_ai_peer as peer

        client = await Client.connect(
            settings.temporal_address,
            namespace=settings.temporal_namespace,
            identity=identity,
            plugins=[PydanticAIPlugin()],
        )
        worker = Worker(
            client,
            task_queue=task_queue,
            workflows=[peer.PydanticAIWorkflow, peer.PydanticAILongWorkflow],
            plugins=[AgentPlugin(peer.temporal_agent), AgentPlugin(peer.temporal_long_agent)],
            **bare_options(),
        )
    else:
        worker = Worker(
            client,
            task_queue=task_queue,
            workflows=[BareWorkflow],
            activities=[noop],
            **bare_options(),
        )
    try:
        async with worker:
            if pool is not None:  # ours: as `run_worker` does; the peers keep Python's defaults
                garbage_collector.settle(settings.gc_threshold)
            print("ready", flush=True)
            await stop.wait()
    finally:
        if pool is not None:
            await pool.close()


class CollectorClock:
    """The time this process spends in garbage collection (`gc.callbacks`); on SIGUSR1 it
    appends `seconds collections` so far to `path`, which the bench reads around a level."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds = 0.0
        self.collections = 0
        self._began = 0.0
        gc.callbacks.append(self._on_collection)
        signal.signal(signal.SIGUSR1, self._report)

    def _on_collection(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        self.seconds += time.perf_counter() - self._began
        self.collections += 1

    def _report(self, *_: object) -> None:
        with self.path.open("a") as out:
            out.write(f"{self.seconds:.6f} {self.collections}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kind", choices=KINDS, required=True)
    parser.add_argument("--task-queue", required=True)
    parser.add_argument("--identity", default=f"bench-{os.getpid()}")
    parser.add_argument(
        "--pyinstrument", type=Path, help="profile the event loop thread into this HTML file"
    )
    parser.add_argument("--gc-report", type=Path, help="see CollectorClock")
    args = parser.parse_args()
    if args.gc_report is not None:
        CollectorClock(args.gc_report)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await serve(args.kind, args.task_queue, args.identity, stop)

    if args.pyinstrument is None:
        asyncio.run(run())
        return
    from pyinstrument import Profiler

    profiler = Profiler(interval=0.001, async_mode="disabled")
    profiler.start()
    try:
        asyncio.run(run())
    finally:
        profiler.stop()
        args.pyinstrument.write_text(profiler.output_html())
        args.pyinstrument.with_suffix(".txt").write_text(profiler.output_text(unicode=False))


if __name__ == "__main__":
    main()
