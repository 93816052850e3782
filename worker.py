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

from agentrun import search_attributes
from agentrun.client import connect
from agentrun.db import open_pool
from agentrun.errors import SetupError
from agentrun.settings import Settings
from agentrun.telemetry import shutdown_tracing
from agentrun.tools.demo import demo_registry
from agentrun.worker_factory import WorkerDeps, build_worker, model_client


async def run_worker(settings: Settings, *, identity: str, stop: asyncio.Event) -> None:
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
        async with build_worker(client, settings, deps):
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
    args = parser.parse_args()

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await run_worker(Settings.load(), identity=args.identity, stop=stop)

    try:
        asyncio.run(serve())
    except SetupError as err:
        sys.exit(f"error: {err}")


if __name__ == "__main__":
    main()
