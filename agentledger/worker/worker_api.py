"""`agentledger.run_worker`: a worker with your tools and MCP servers, in your own process.

`agentledger-worker` is this with flags. It is `AgentLedgerPlugin` on a Client and a Worker, as
in your own Temporal app, plus what a worker process adds at its
edge: the settings from the environment, MCP servers held open, the slots, cache, drain and
version of its Worker, the Prometheus endpoint, the garbage collector, and its log lines.
The plugin applies the DDL its tools declare and records its tool set on its task queue
(refusing to join workers that have other tools, see agentledger.store.tool_sets); the
worker then polls until `stop` is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from temporalio.worker import Worker

from agentledger.core.config import AgentLedgerConfig, process_environment
from agentledger.core.errors import SetupError
from agentledger.core.providers import load_providers, provider_keys
from agentledger.temporal.client import client_options, connect
from agentledger.temporal.telemetry import shutdown_tracing
from agentledger.tools.loading import DEMO_TOOLS, load_registry
from agentledger.tools.mcp_servers import McpServerSpec
from agentledger.worker import garbage_collector
from agentledger.worker.drain import DrainReport, StepsInHand
from agentledger.worker.plugin import AgentLedgerPlugin
from agentledger.worker.worker_factory import ResourceTargets, run_queue_options

log = logging.getLogger(__name__)
# What stops a worker process: Ctrl-C at a terminal, and SIGTERM from a deploy or a supervisor.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _mcp_tools(servers: list[McpServerSpec]) -> Any:
    """The servers' tools, held open while the worker runs; the MCP client is loaded only when
    a server is named (it is most of a worker's start-up imports)."""
    if not servers:
        return contextlib.nullcontext([])
    from agentledger.tools.mcp import mcp_tools

    return mcp_tools(servers)


@dataclass
class WorkerEdge:
    """What a worker process's edge (agentledger-worker's flags, the environment) hands the
    code that connects its Client and builds its Worker (`agentledger.worker_command_line()`,
    worker.py): the config, `Client.connect`'s and `Worker`'s arguments, and `attend`, which
    stops the worker when the process is told to (or `serve`, for a program that stops it
    with an event of its own)."""

    config: AgentLedgerConfig
    identity: str
    stop: asyncio.Event
    resources: ResourceTargets | None = None
    steps: StepsInHand = field(default_factory=StepsInHand)
    _drains: list[DrainReport] = field(default_factory=list)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def task_queue(self) -> str:
        return self.config.task_queue

    def client_options(self) -> dict[str, Any]:
        """`Client.connect(**edge.client_options(), plugins=[AgentLedgerPlugin(edge.config)])`:
        the server, TLS or API key, converter, tracing and metrics the settings name."""
        return client_options(self.config, identity=self.identity, serve_metrics=True)

    def worker_options(self) -> dict[str, Any]:
        """`Worker(client, task_queue=edge.task_queue, ..., **edge.worker_options())`: the
        slots (or the machine's tuner), workflow cache, drain and version the flags and
        settings name, and the count of steps in hand the drain reports."""
        return run_queue_options(self.config, self.steps, self.resources)

    def attend(self, worker: Worker, plugin: AgentLedgerPlugin) -> None:
        """Stand by `worker` (built on a Client with `plugin`) while `await worker.run()`
        serves: say in the log when it polls, and on SIGINT or SIGTERM shut it down, which
        drains the steps in hand (and the queues beside it) within the grace period, and
        says how that went once it has stopped (when this edge closes)."""
        loop = asyncio.get_running_loop()
        drain = DrainReport(self.steps, self.config.drain_seconds, self.identity)
        self._drains.append(drain)

        def stop() -> None:
            if not drain.begun:
                drain.began()
                self._tasks.add(loop.create_task(worker.shutdown()))

        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, stop)

        async def polling() -> None:
            await plugin.serving(worker)
            garbage_collector.settle(self.config.gc_threshold)
            _say_serving(self.config, self.identity, plugin.tools_of(worker))

        self._tasks.add(loop.create_task(polling()))

    def closed(self) -> None:
        """The process's worker has stopped: what its drain came to, in the log."""
        for task in self._tasks:
            task.cancel()
        for drain in self._drains:
            if drain.begun:
                drain.ended()

    async def serve(self, plugin: AgentLedgerPlugin, worker: Worker) -> None:
        """Run `worker` (built on a Client with `plugin`) until the process is told to
        stop; then it and the queues beside it drain together, and the log says how."""
        drain = DrainReport(self.steps, self.config.drain_seconds, self.identity)
        async with plugin.running(worker):
            garbage_collector.settle(self.config.gc_threshold)
            _say_serving(self.config, self.identity, plugin.tools_of(worker))
            await self.stop.wait()
            drain.began()
        drain.ended()


@contextlib.asynccontextmanager
async def worker_edge(
    tools: Iterable[Any] | None = None,
    *,
    mcp: Iterable[str | McpServerSpec] = (),
    settings: AgentLedgerConfig | None = None,
    identity: str | None = None,
    stop: asyncio.Event | None = None,
    resources: ResourceTargets | None = None,
    demo: bool = False,
) -> AsyncIterator[WorkerEdge]:
    """A worker process's edge for the life of the block (run_worker's arguments): its
    tools loaded and MCP servers held open, providers' keys read from the environment."""
    environ = process_environment()  # this is an edge: providers' keys are read here
    settings = settings or AgentLedgerConfig.load(environ)
    identity = identity or f"worker-{socket.gethostname()}-{os.getpid()}"
    servers = [s if isinstance(s, McpServerSpec) else McpServerSpec.parse(s) for s in mcp]
    sources = [*(tools or ()), *([DEMO_TOOLS] if demo else [])]
    if not sources and not servers:
        raise SetupError(
            "no tools to serve: name them (`agentledger-worker --tools PKG.MODULE:ATTR` or "
            "AGENTLEDGER_TOOLS; MCP servers with --mcp or AGENTLEDGER_MCP), or serve the demo's "
            "tools with `agentledger-worker --demo` (run_worker(demo=True))"
        )
    async with _mcp_tools(servers) as served:
        registry = load_registry(sources, served)  # a bad tool is named before the rest
        settings.require_database()
        config = settings.model_copy(
            update={
                "tools": (registry,),
                "demo": False,  # the demo's tools are in the registry already
                "sandbox": None,  # a sandbox is one of `tools` (agentledger-worker --sandbox)
                "engine_queue": settings.task_queue,
                "provider_keys": provider_keys(load_providers(settings.providers), environ),
            }
        )
        edge = WorkerEdge(config, identity, stop or asyncio.Event(), resources)
        try:
            yield edge
        finally:
            edge.closed()
            shutdown_tracing()


async def serve_engine(
    edge: WorkerEdge,
    workflows: Sequence[type] = (),
    activities: Sequence[Callable[..., Any]] = (),
) -> None:
    """`agentledger-worker`'s own worker: the plugin on a Client and a Worker, as a Temporal
    app of your own connects and builds them."""
    plugin = AgentLedgerPlugin(edge.config)
    client = await connect(
        edge.config, identity=edge.identity, serve_metrics=True, plugins=[plugin]
    )
    worker = Worker(
        client,
        task_queue=edge.task_queue,
        workflows=workflows,
        activities=activities,
        **edge.worker_options(),
    )
    await edge.serve(plugin, worker)


async def run_worker(
    tools: Iterable[Any] | None = None,
    *,
    mcp: Iterable[str | McpServerSpec] = (),
    settings: AgentLedgerConfig | None = None,
    identity: str | None = None,
    stop: asyncio.Event | None = None,
    resources: ResourceTargets | None = None,
    workflows: Sequence[type] = (),
    activities: Sequence[Callable[..., Any]] = (),
    demo: bool = False,
) -> None:
    """Serve runs until `stop` is set (for ever without one).

    `tools`: registries, tools, lists of tools, or `PKG.MODULE:ATTR` references to them.
    `demo`: serve the demo's tools as well (`agentledger-worker --demo`); a worker with no tools,
    no MCP servers and no `demo` refuses to start rather than serve the demo's by surprise.
    `mcp`: `NAME=COMMAND ARGS...` (stdio) or `NAME=https://...`, whose tools the model sees
    as `NAME__TOOL`. The config comes from the
    environment unless given. A bad tool, server or tool set raises `SetupError` before the
    worker polls. `resources` sizes task slots by the machine's CPU and memory instead of
    fixed counts. `workflows` and `activities`: your own, served beside the engine's (a
    workflow of yours that runs an agent with `agentledger.workflows.run_agent`, say).
    Without a `stop` of yours, Ctrl-C (SIGINT) and SIGTERM stop it: the steps in hand drain
    within the grace period (AGENTLEDGER_DRAIN_SECONDS) and it returns.
    """
    async with worker_edge(
        tools,
        mcp=mcp,
        settings=settings,
        identity=identity,
        stop=stop,
        resources=resources,
        demo=demo,
    ) as edge:
        with contextlib.nullcontext() if stop else _stopped_by_signals(edge.stop):
            await serve_engine(edge, workflows, activities)


@contextlib.contextmanager
def _stopped_by_signals(stop: asyncio.Event) -> Iterator[None]:
    """SIGINT and SIGTERM set `stop` while the block runs, whatever the process inherited:
    a program a shell started in the background ignores SIGINT, so asyncio.run's own Ctrl-C
    never comes, and SIGTERM (a deploy's stop) would end it without a drain. Outside the
    main thread no handler can be set, and the caller stops the worker its own way."""
    loop = asyncio.get_running_loop()
    taken: list[signal.Signals] = []
    for sig in STOP_SIGNALS:
        try:
            loop.add_signal_handler(sig, stop.set)
        except (ValueError, RuntimeError):
            continue
        taken.append(sig)
    try:
        yield
    finally:
        for sig in taken:
            loop.remove_signal_handler(sig)


def _say_serving(settings: AgentLedgerConfig, identity: str, tools: list[str]) -> None:
    log.info(
        "worker %s polling %r at %s with tools: %s; Ctrl-C drains and stops it",
        identity,
        settings.task_queue,
        settings.temporal_address,
        ", ".join(tools),
        extra={"identity": identity, "task_queue": settings.task_queue, "tools": tools},
    )
    if settings.build_id:
        log.info(
            "version %s/%s: runs pinned; `agentledger deploy %s` sends new runs here",
            settings.deployment_name,
            settings.build_id,
            settings.build_id,
        )
    if settings.prometheus_bind:
        log.info("metrics at http://%s/metrics", settings.prometheus_bind)
