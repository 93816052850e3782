"""Start one worker against the stack the settings name: `agentrun-worker`.

Run as many as you like, on as many machines: Temporal hands each step to one of them, and
a step whose worker dies is retried on another after its heartbeat timeout. Workers on one
task queue must have the same tools (the second kind refuses to start; see the README).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import sys

from agentrun.core.errors import SetupError
from agentrun.core.settings import Settings
from agentrun.worker.tool_flags import add_tool_flags, tool_sources
from agentrun.worker.worker_api import run_worker
from agentrun.worker.worker_factory import ResourceTargets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--identity", default=f"worker-{socket.gethostname()}-{os.getpid()}")
    add_tool_flags(parser)
    parser.add_argument(
        "--resource-tuner",
        action="store_true",
        help="size task slots by this machine's CPU and memory instead of fixed counts",
    )
    parser.add_argument(
        "--workflow-cache",
        type=int,
        metavar="RUNS",
        help="runs kept in memory between their steps (default AGENTRUN_WORKFLOW_CACHE); "
        "fewer hold less memory, and a run not held replays its history on its next step",
    )
    parser.add_argument("--target-cpu", type=float, default=0.8, help="with --resource-tuner")
    parser.add_argument("--target-memory", type=float, default=0.8, help="with --resource-tuner")
    args = parser.parse_args()
    if args.workflow_cache is not None and args.workflow_cache < 0:
        parser.error("--workflow-cache is a number of runs: 0 or more")
    for name in ("target_cpu", "target_memory"):
        if not 0 < getattr(args, name) <= 1:
            parser.error(f"--{name.replace('_', '-')} is a fraction of the machine: (0, 1]")
    resources = (
        ResourceTargets(cpu=args.target_cpu, memory=args.target_memory)
        if args.resource_tuner
        else None
    )

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        settings = Settings.load()
        if args.workflow_cache is not None:
            settings = settings.model_copy(update={"workflow_cache": args.workflow_cache})
        tools, mcp = tool_sources(args, settings, args.identity)
        await run_worker(
            tools,
            mcp=mcp,
            settings=settings,
            identity=args.identity,
            stop=stop,
            resources=resources,
        )

    try:
        asyncio.run(serve())
    except SetupError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
