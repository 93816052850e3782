"""Start one worker against the stack the settings name: `agentledger-worker`.

Run as many as you like, on as many machines: Temporal hands each step to one of them, and
a step whose worker dies is retried on another after its heartbeat timeout. Workers on one
task queue must have the same tools (the second kind refuses to start; see the README).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import socket
import sys
from collections.abc import AsyncIterator, Sequence

from temporalio.worker import Worker

from agentledger.core.config import AgentLedgerConfig
from agentledger.core.errors import ServiceUnreachable, SetupError
from agentledger.core.extras import missing_extra
from agentledger.core.log_setup import LEVELS, configure_logging
from agentledger.temporal.client import connect, is_connect_failure, unreachable
from agentledger.worker.plugin import AgentLedgerPlugin
from agentledger.worker.tool_flags import add_tool_flags, tool_sources
from agentledger.worker.worker_api import WorkerEdge, worker_edge
from agentledger.worker.worker_factory import ResourceTargets

log = logging.getLogger(__name__)


def parser() -> argparse.ArgumentParser:
    """`agentledger-worker`'s flags, which a deployment's worker.py takes too."""
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
    return parser


@contextlib.asynccontextmanager
async def worker_command_line(argv: Sequence[str] | None = None) -> AsyncIterator[WorkerEdge]:
    """A worker process's edge from `agentledger-worker`'s command line: its flags and the
    environment read once into the config, logging set up, its tools loaded and MCP servers
    held open, for the life of the block; a setting that does not load, a service that does
    not answer or a missing extra is one log line and the process's exit code
    (agentledger.core.errors). Public as `agentledger.worker_command_line`: a deployment's
    worker.py connects its Client and builds its Worker inside it (worker.py)."""
    parser_ = parser()
    args = parser_.parse_args(argv)
    if args.workflow_cache is not None and args.workflow_cache < 0:
        parser_.error("--workflow-cache is a number of runs: 0 or more")
    if args.drain_seconds is not None and not 0 <= args.drain_seconds < float("inf"):
        parser_.error("--drain-seconds is a duration: 0 or more")
    for name in ("target_cpu", "target_memory"):
        if not 0 < getattr(args, name) <= 1:
            parser_.error(f"--{name.replace('_', '-')} is a fraction of the machine: (0, 1]")
    resources = (
        ResourceTargets(cpu=args.target_cpu, memory=args.target_memory)
        if args.resource_tuner
        else None
    )
    try:
        settings = AgentLedgerConfig.load()
    except SetupError as err:
        # No config, so no log format to speak in: one plain line, as the CLI says it.
        sys.stderr.write(f"error: {err}\n")
        raise SystemExit(2) from err
    configure_logging(args.log_level or settings.log_level, settings.log_format)
    if args.workflow_cache is not None:
        settings = settings.model_copy(update={"workflow_cache": args.workflow_cache})
    if args.drain_seconds is not None:
        settings = settings.model_copy(update={"drain_seconds": args.drain_seconds})
    try:
        tools, mcp = tool_sources(args, settings, args.identity)
        async with worker_edge(
            tools,
            mcp=mcp,
            settings=settings,
            identity=args.identity,
            resources=resources,
            demo=args.demo,
        ) as edge:
            yield edge
    except (SetupError, ServiceUnreachable) as err:
        log.error("%s", err)
        raise SystemExit(err.exit_code) from err  # 2 a setting, 4 a service unreachable
    except ImportError as err:  # `--sandbox` or AGENTLEDGER_OTEL without their extra
        missing = missing_extra(err)
        if missing is None:
            raise
        log.error("%s", missing)
        raise SystemExit(missing.exit_code) from err
    except RuntimeError as err:
        if not is_connect_failure(err):
            raise
        log.error("%s", unreachable(settings, err))  # a Client.connect's failure
        raise SystemExit(ServiceUnreachable.exit_code) from err


async def serve_engine_from_command_line() -> None:
    """`agentledger-worker`: the engine's own worker, as a deployment's worker.py builds its
    own."""
    async with worker_command_line() as edge:
        plugin = AgentLedgerPlugin(edge.config)
        client = await connect(
            edge.config, identity=edge.identity, serve_metrics=True, plugins=[plugin]
        )
        worker = Worker(client, task_queue=edge.task_queue, **edge.worker_options())
        edge.attend(worker, plugin)
        await worker.run()


def main() -> None:
    """The `agentledger-worker` console script (pyproject.toml): the engine alone."""
    asyncio.run(serve_engine_from_command_line())


if __name__ == "__main__":
    main()
