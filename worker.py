"""Start one worker against the stack the settings name: `python worker.py`.

Run as many as you like, on as many machines: Temporal hands each step to one of them, and
a step whose worker dies is retried on another after its heartbeat timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import sys

from temporalio.service import RPCError
from temporalio.worker import WorkerTuner

from agentrun import search_attributes, tenant_ops
from agentrun.client import connect
from agentrun.db import open_pool
from agentrun.settings import Settings, SetupError
from agentrun.telemetry import shutdown_tracing
from agentrun.tenant_store import TenantStore
from agentrun.tools.demo import demo_registry
from agentrun.worker_factory import WorkerDeps, build_worker, model_client, resource_tuner


async def run_worker(
    settings: Settings,
    *,
    identity: str,
    stop: asyncio.Event,
    tuner: WorkerTuner | None = None,
) -> None:
    client = await connect(settings, identity=identity, serve_metrics=True)
    if settings.search_attributes:
        try:
            await search_attributes.register(client)
        except RPCError as err:
            print(
                f"warning: could not register search attributes ({err.message}); register "
                "them by hand, or start runs with AGENTRUN_SEARCH_ATTRIBUTES=0",
                flush=True,
            )
    pool = await open_pool(settings.require_database())
    deps = WorkerDeps(pool=pool, model_client=model_client(settings), registry=demo_registry())
    try:
        # Tenants' weights and model-call rates, from Postgres to the server (a new cluster).
        tenants = await TenantStore(pool).all_limits()
        try:
            await tenant_ops.apply_queue_config(client, settings.task_queue, tenants)
        except RPCError as err:
            print(
                f"warning: the server did not take tenants' weights and rates ({err.message});"
                " fairness weights and model-call rates are not enforced",
                flush=True,
            )
        async with build_worker(client, settings, deps, tuner=tuner):
            print(
                f"worker {identity} polling {settings.task_queue!r} at "
                f"{settings.temporal_address}; Ctrl-C drains and stops it",
                flush=True,
            )
            if settings.prometheus_bind:
                print(f"metrics at http://{settings.prometheus_bind}/metrics", flush=True)
            await stop.wait()
            print("draining: finishing the steps in hand", flush=True)
    finally:
        await pool.close()
        shutdown_tracing()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--identity", default=f"worker-{socket.gethostname()}-{os.getpid()}")
    parser.add_argument(
        "--resource-tuner",
        action="store_true",
        help="size task slots by this machine's CPU and memory instead of fixed counts",
    )
    parser.add_argument("--target-cpu", type=float, default=0.8, help="with --resource-tuner")
    parser.add_argument("--target-memory", type=float, default=0.8, help="with --resource-tuner")
    args = parser.parse_args()
    for name in ("target_cpu", "target_memory"):
        if not 0 < getattr(args, name) <= 1:
            parser.error(f"--{name.replace('_', '-')} is a fraction of the machine: (0, 1]")
    tuner = resource_tuner(args.target_cpu, args.target_memory) if args.resource_tuner else None

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await run_worker(Settings.load(), identity=args.identity, stop=stop, tuner=tuner)

    try:
        asyncio.run(serve())
    except SetupError as err:
        sys.exit(f"error: {err}")


if __name__ == "__main__":
    main()
