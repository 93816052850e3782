"""`agentrun.run_worker`: a worker with your tools and MCP servers, in your own process.

`agentrun-worker` is this with flags. The worker applies the DDL its tools declare, records its
tool set on its task queue (refusing to join workers that have other tools, see
agentrun/store/tool_sets.py), then polls until `stop` is set.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from agentrun.core.errors import SetupError
from agentrun.core.providers import load_providers, provider_keys
from agentrun.core.settings import Settings, process_environment
from agentrun.temporal.client import connect
from agentrun.temporal.telemetry import shutdown_tracing
from agentrun.tools.loading import DEMO_TOOLS, load_registry
from agentrun.tools.mcp_servers import McpServerSpec
from agentrun.worker import garbage_collector
from agentrun.worker.serving import register_search_attributes, serving
from agentrun.worker.worker_factory import (
    ResourceTargets,
    WorkerDeps,
    build_worker,
    model_client,
    open_worker_pool,
)

log = logging.getLogger(__name__)


def _mcp_tools(servers: list[McpServerSpec]) -> Any:
    """The servers' tools, held open while the worker runs; the MCP client is loaded only when
    a server is named (it is most of a worker's start-up imports)."""
    if not servers:
        return contextlib.nullcontext([])
    from agentrun.tools.mcp import mcp_tools

    return mcp_tools(servers)


async def run_worker(
    tools: Iterable[Any] | None = None,
    *,
    mcp: Iterable[str | McpServerSpec] = (),
    settings: Settings | None = None,
    identity: str | None = None,
    stop: asyncio.Event | None = None,
    resources: ResourceTargets | None = None,
    workflows: Sequence[type] = (),
    activities: Sequence[Callable[..., Any]] = (),
    demo: bool = False,
) -> None:
    """Serve runs until `stop` is set (for ever without one).

    `tools`: registries, tools, lists of tools, or `PKG.MODULE:ATTR` references to them.
    `demo`: serve the demo's tools as well (`agentrun-worker --demo`); a worker with no tools,
    no MCP servers and no `demo` refuses to start rather than serve the demo's by surprise.
    `mcp`: `NAME=COMMAND ARGS...` (stdio) or `NAME=https://...`, whose tools the model sees
    as `NAME__TOOL`. Settings come from the
    environment unless given. A bad tool, server or tool set raises `SetupError` before the
    worker polls. `resources` sizes task slots by the machine's CPU and memory instead of
    fixed counts. `workflows` and `activities`: your own, served beside the engine's (a
    workflow of yours that runs an agent with `agentrun.workflows.run_agent`, say).
    """
    environ = process_environment()  # this is an edge: providers' keys are read here
    settings = settings or Settings.load(environ)
    identity = identity or f"worker-{socket.gethostname()}-{os.getpid()}"
    stop = stop or asyncio.Event()
    servers = [s if isinstance(s, McpServerSpec) else McpServerSpec.parse(s) for s in mcp]
    sources = [*(tools or ()), *([DEMO_TOOLS] if demo else [])]
    if not sources and not servers:
        raise SetupError(
            "no tools to serve: name them (`agentrun-worker --tools PKG.MODULE:ATTR` or "
            "AGENTRUN_TOOLS; MCP servers with --mcp or AGENTRUN_MCP), or serve the demo's "
            "tools with `agentrun-worker --demo` (run_worker(demo=True))"
        )
    async with _mcp_tools(servers) as served:
        registry = load_registry(sources, served)
        client = await connect(settings, identity=identity, serve_metrics=True)
        if settings.search_attributes:
            await register_search_attributes(client)
        pool = await open_worker_pool(settings)
        try:
            deps = WorkerDeps(
                pool=pool,
                model_client=model_client(settings),
                registry=registry,
                provider_keys=provider_keys(load_providers(settings.providers), environ),
            )
            async with (
                serving(client, pool, settings.task_queue, identity, registry),
                build_worker(
                    client,
                    settings,
                    deps,
                    resources=resources,
                    workflows=workflows,
                    activities=activities,
                ),
            ):
                garbage_collector.settle(settings.gc_threshold)
                log.info(
                    "worker %s polling %r at %s with tools: %s; Ctrl-C drains and stops it",
                    identity,
                    settings.task_queue,
                    settings.temporal_address,
                    ", ".join(registry.names()),
                    extra={
                        "identity": identity,
                        "task_queue": settings.task_queue,
                        "tools": registry.names(),
                    },
                )
                if settings.build_id:
                    log.info(
                        "version %s/%s: runs pinned; `agentrun deploy %s` sends new runs here",
                        settings.deployment_name,
                        settings.build_id,
                        settings.build_id,
                    )
                if settings.prometheus_bind:
                    log.info("metrics at http://%s/metrics", settings.prometheus_bind)
                await stop.wait()
        finally:
            await pool.close()
            shutdown_tracing()
