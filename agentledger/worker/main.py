"""Start one worker against the stack the settings name: `agentledger-worker`.

Run as many as you like, on as many machines: Temporal hands each step to one of them, and
a step whose worker dies is retried on another after its heartbeat timeout. Workers on one
task queue must have the same tools (the second kind refuses to start; see the README).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable

from agentledger.core.errors import ServiceUnreachable, SetupError
from agentledger.core.extras import missing_extra
from agentledger.core.log_setup import LEVELS, configure_logging
from agentledger.core.settings import Settings
from agentledger.temporal.client import is_connect_failure, unreachable
from agentledger.worker.tool_flags import add_tool_flags, tool_sources
from agentledger.worker.worker_api import WorkerEdge, serve_engine, worker_edge
from agentledger.worker.worker_factory import ResourceTargets

log = logging.getLogger(__name__)


def worker_command(serve: Callable[[WorkerEdge], Awaitable[None]] = serve_engine) -> None:
    """`agentledger-worker`'s command line (its flags, settings, logging, signals and exit
    codes), public as `agentledger.worker_command`: a deployment's worker.py passes `serve`,
    its own code that connects its Client with `AgentLedgerPlugin(edge.config)`, builds its
    Worker with `edge.worker_options()` and runs it with `edge.serve` (worker.py)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--identity", default=f"worker-{socket.gethostname()}-{os.getpid()}")
    add_tool_flags(parser)
    parser.add_argument(
        "--demo",
        action="store_true",
        help="serve the demo's tools (agentledger.demo); without tools, MCP servers or this "
        "flag the worker refuses to start",
    )
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=LEVELS,
        help="what to log on stderr (default AGENTLEDGER_LOG_LEVEL, else INFO; other libraries' "
        "records from WARNING up, all at DEBUG); AGENTLEDGER_LOG_FORMAT=json writes one JSON "
        "object per line",
    )
    parser.add_argument(
        "--resource-tuner",
        action="store_true",
        help="size task slots by this machine's CPU and memory instead of fixed counts",
    )
    parser.add_argument(
        "--workflow-cache",
        type=int,
        metavar="RUNS",
        help="runs kept in memory between their steps (default AGENTLEDGER_WORKFLOW_CACHE); "
        "fewer hold less memory, and a run not held replays its history on its next step",
    )
    parser.add_argument(
        "--drain-seconds",
        type=float,
        metavar="SECONDS",
        help="on stop, how long the steps in hand may finish before they are cancelled "
        "(default AGENTLEDGER_DRAIN_SECONDS, 30)",
    )
    parser.add_argument("--target-cpu", type=float, default=0.8, help="with --resource-tuner")
    parser.add_argument("--target-memory", type=float, default=0.8, help="with --resource-tuner")
    args = parser.parse_args()
    if args.workflow_cache is not None and args.workflow_cache < 0:
        parser.error("--workflow-cache is a number of runs: 0 or more")
    if args.drain_seconds is not None and not 0 <= args.drain_seconds < float("inf"):
        parser.error("--drain-seconds is a duration: 0 or more")
    for name in ("target_cpu", "target_memory"):
        if not 0 < getattr(args, name) <= 1:
            parser.error(f"--{name.replace('_', '-')} is a fraction of the machine: (0, 1]")
    resources = (
        ResourceTargets(cpu=args.target_cpu, memory=args.target_memory)
        if args.resource_tuner
        else None
    )

    try:
        settings = Settings.load()
    except SetupError as err:
        # No settings, so no log format to speak in: one plain line, as the CLI says it.
        sys.stderr.write(f"error: {err}\n")
        sys.exit(2)
    configure_logging(args.log_level or settings.log_level, settings.log_format)

    async def main(settings: Settings) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        if args.workflow_cache is not None:
            settings = settings.model_copy(update={"workflow_cache": args.workflow_cache})
        if args.drain_seconds is not None:
            settings = settings.model_copy(update={"drain_seconds": args.drain_seconds})
        tools, mcp = tool_sources(args, settings, args.identity)
        async with worker_edge(
            tools,
            mcp=mcp,
            settings=settings,
            identity=args.identity,
            stop=stop,
            resources=resources,
            demo=args.demo,
        ) as edge:
            await serve(edge)

    try:
        asyncio.run(main(settings))
    except SetupError as err:
        log.error("%s", err)
        sys.exit(err.exit_code)  # 2 a setting, 4 a service unreachable (docs/using.md "Exit codes")
    except ImportError as err:  # `--sandbox` or AGENTLEDGER_OTEL without their extra
        missing = missing_extra(err)
        if missing is None:
            raise
        log.error("%s", missing)
        sys.exit(missing.exit_code)
    except RuntimeError as err:
        if not is_connect_failure(err):
            raise
        log.error("%s", unreachable(settings, err))  # your own Client.connect's failure
        sys.exit(ServiceUnreachable.exit_code)


def main() -> None:
    """The `agentledger-worker` console script (pyproject.toml): the engine alone."""
    worker_command()


if __name__ == "__main__":
    main()
