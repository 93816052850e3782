"""`agentledger.AgentLedgerPlugin`: agentledger inside your own Temporal app, on your own Client and
Worker, so a Temporal team keeps its own app.

    client = await Client.connect(address, plugins=[AgentLedgerPlugin(config)])
    worker = Worker(client, task_queue="orders", workflows=[...], activities=[...])

On the Client it makes the data converter agentledger's (pydantic payloads) while keeping your
codec, so your encryption covers every agentledger payload too. On each Worker built on that
Client (or the one queue `AgentLedgerConfig.task_queue` names) it registers the engine's
workflows and activities, shares the pure core with the workflow sandbox, guards payload
sizes, and, while the worker runs, serves the run's model-call and mirror queues beside it
and joins the queue's tool set. On a Replayer it registers the engine's workflows and the
same converter. Other plugins (OpenTelemetry, OpenAI Agents) compose around it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client
from temporalio.contrib.pydantic import PydanticPayloadConverter
from temporalio.converter import (
    DataConverter,
    DefaultFailureConverter,
    DefaultFailureConverterWithEncodedAttributes,
    DefaultPayloadConverter,
)
from temporalio.plugin import SimplePlugin
from temporalio.worker import (
    ReplayerConfig,
    Worker,
    WorkerConfig,
    WorkflowRunner,
)
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from agentledger.activities.provider_clients import model_client
from agentledger.core.config import AgentLedgerConfig
from agentledger.core.errors import SetupError
from agentledger.core.sandbox_limits import SandboxLimits
from agentledger.store.db import activity_slots_for, pool_size_for, ready_schema, unopened_pool
from agentledger.temporal.encryption import codec_for, speaks_pydantic
from agentledger.tools.loading import DEMO_TOOLS, load_registry
from agentledger.tools.registry import ToolRegistry
from agentledger.worker.sandbox_contexts import for_converter
from agentledger.worker.serving import register_search_attributes, serving
from agentledger.worker.worker_factory import (
    ACTIVITY_SLOTS,
    AgentWorkers,
    EngineParts,
    WorkerDeps,
    engine_parts,
    side_queue_workers,
    slot_shares,
    with_engine,
)
from agentledger.workflows.engine import ENGINE_WORKFLOWS, SANDBOX_PASSTHROUGH

PLUGIN_NAME = "agentledger.AgentLedgerPlugin"


def agentledger_converter(
    given: DataConverter | None, config: AgentLedgerConfig | None = None
) -> DataConverter:
    """`given` with agentledger's payload converter (pydantic), keeping its codec and its
    failure converter; without a codec, agentledger's own encryption when `config` has keys,
    which encodes failures' messages too, as agentledger's own converter does."""
    base = given or DataConverter.default
    converter = base.payload_converter_class
    if converter is DefaultPayloadConverter:
        converter = PydanticPayloadConverter
    elif not speaks_pydantic(base):
        raise SetupError(
            f"agentledger's payloads are pydantic models, and the client's payload converter "
            f"({converter.__name__}) has no pydantic JSON converter: build it on "
            "temporalio.contrib.pydantic, or leave the payload converter to AgentLedgerPlugin"
        )
    codec, failures = base.payload_codec, base.failure_converter_class
    if codec is None and config is not None:
        codec = codec_for(config)
        if codec is not None and failures is DefaultFailureConverter:
            # agentledger's own codec seals failures' messages too; yours decides for itself.
            failures = DefaultFailureConverterWithEncodedAttributes
    return dataclasses.replace(
        base,
        payload_converter_class=converter,
        payload_codec=codec,
        failure_converter_class=failures,
    )


def side_queue_options(run: WorkerConfig, parts: EngineParts) -> dict[str, Any]:
    """What the run queue's model-call and mirror workers take from the run worker: its
    own interceptors (a count of steps in hand, say) with the payload guard, its drain, its
    version (a pinned run's model calls go to its own build) and its tuner (shared: the
    machine's targets hold for the process, not per queue)."""
    beside: dict[str, Any] = {
        "interceptors": [*run.get("interceptors", ()), parts.interceptor],
        "deployment_config": run.get("deployment_config"),
    }
    if run.get("graceful_shutdown_timeout"):
        beside["graceful_shutdown_timeout"] = run["graceful_shutdown_timeout"]
    if run.get("tuner") is not None:
        beside["tuner"] = run["tuner"]
    return beside


def sandbox_sharing_core(given: WorkflowRunner | None) -> WorkflowRunner:
    """`given` (the SDK's sandbox by default) sharing agentledger's pure core and native modules
    with the worker (agentledger.workflows.engine.SANDBOX_PASSTHROUGH); an unsandboxed
    runner is left as it is."""
    runner = given or SandboxedWorkflowRunner()
    if not isinstance(runner, SandboxedWorkflowRunner):
        return runner
    return dataclasses.replace(
        runner, restrictions=runner.restrictions.with_passthrough_modules(*SANDBOX_PASSTHROUGH)
    )


@dataclass
class _Engine:
    """What the plugin added to one worker, and what runs beside it while it runs."""

    parts: EngineParts
    registry: ToolRegistry
    beside: dict[str, Any]  # the run worker's options its side-queue workers take too
    serving: asyncio.Event = field(default_factory=asyncio.Event)
    side_workers: tuple[Worker, ...] = ()


class AgentLedgerPlugin(SimplePlugin):
    """agentledger on your own Client and Worker; `config` says where the mirror, the models
    and the tools are (agentledger.AgentLedgerConfig)."""

    def __init__(self, config: AgentLedgerConfig) -> None:
        self.config = config
        super().__init__(
            PLUGIN_NAME,
            data_converter=lambda given: agentledger_converter(given, config),
            workflow_runner=sandbox_sharing_core,
        )
        # The mirror: the pool the program owns, else one the plugin opens and closes.
        self._pool = config.pool or unopened_pool(
            config.require_database(),
            pool_size_for(ACTIVITY_SLOTS),
            prepared_statements=config.prepared_statements,
        )
        self._pool_users = 0
        self._engines: dict[str, _Engine] = {}  # by the task queue of the worker it is on

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        config = super().configure_worker(config)
        queue = config.get("task_queue", "")
        if self.config.engine_queue not in (None, queue):
            return config  # a worker of yours on another queue: left as it is
        client = config["client"]
        if not speaks_pydantic(client.data_converter):
            raise SetupError(
                "AgentLedgerPlugin is on this worker but not on its client: pass it to "
                "Client.connect(..., plugins=[AgentLedgerPlugin(config)]) (workers built on "
                "that client take it from there)"
            )
        registry = self._registry(client.identity)
        deps = WorkerDeps(
            pool=self._pool,
            model_client=model_client(self.config),
            registry=registry,
            provider_keys=self.config.provider_keys,
        )
        parts = engine_parts(client, self.config, deps)
        self._engines[queue] = _Engine(parts, registry, side_queue_options(config, parts))
        configured = cast(WorkerConfig, {**config, **with_engine(config, parts)})
        if "workflow_runner" in configured:
            configured["workflow_runner"] = for_converter(
                configured["workflow_runner"], client.data_converter
            )
        return configured

    def configure_replayer(self, config: ReplayerConfig) -> ReplayerConfig:
        config = super().configure_replayer(config)
        config["workflows"] = [*config.get("workflows", ()), *ENGINE_WORKFLOWS]
        return config

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        engine = self._engines.get(worker.task_queue)
        if engine is None:
            await next(worker)
            return
        client = worker.client
        if self.config.search_attributes:
            await register_search_attributes(client)
        async with (
            self._mirror() as pool,
            serving(client, pool, worker.task_queue, client.identity, engine.registry),
            self._side_queues(client, worker.task_queue, engine),
        ):
            engine.serving.set()
            await next(worker)

    @contextlib.asynccontextmanager
    async def running(self, worker: Worker) -> AsyncIterator[Worker]:
        """Run `worker` (built with this plugin) for the life of the block, entered once it
        and its side queues poll (a tool set or server that refuses it raises here); on
        exit they all drain together, within one grace period, not one after another."""
        engine = self._engines[worker.task_queue]
        run = asyncio.create_task(worker.run())
        serving = asyncio.create_task(engine.serving.wait())
        await asyncio.wait({run, serving}, return_when=asyncio.FIRST_COMPLETED)
        serving.cancel()
        if run.done():
            await run  # it stopped before it served: its error
            raise SetupError(f"the worker on {worker.task_queue!r} stopped before it served")
        try:
            yield worker
        finally:
            await asyncio.gather(worker.shutdown(), *(w.shutdown() for w in engine.side_workers))
            await run

    async def serving(self, worker: Worker) -> None:
        """Return once `worker` (built with this plugin, run by `await worker.run()`) and
        its side queues poll."""
        await self._engines[worker.task_queue].serving.wait()

    def tools_of(self, worker: Worker) -> list[str]:
        """The names of the tools the plugin serves on `worker`'s queue."""
        return self._engines[worker.task_queue].registry.names()

    def _registry(self, identity: str) -> ToolRegistry:
        sources = [*self.config.tools, *([DEMO_TOOLS] if self.config.demo else [])]
        if self.config.sandbox:
            from agentledger.tools.sandbox import sandbox_tools  # the Docker SDK, only when used

            limits = SandboxLimits.parse(self.config.sandbox_limits)
            sources.append(sandbox_tools(self.config.sandbox, limits, identity=identity))
        if not sources:
            raise SetupError(
                "AgentLedgerConfig names no tools: give it tools=[...] (registries, tools or "
                "PKG.MODULE:ATTR references), or demo=True for the demo's"
            )
        return load_registry(sources)

    @contextlib.asynccontextmanager
    async def _mirror(self) -> AsyncIterator[AsyncConnectionPool]:
        """The mirror's pool, migrated and opened with the first worker and closed with the
        last when the plugin made it; a pool you gave stays yours."""
        owned = self.config.pool is None
        if owned and self._pool_users == 0:
            await ready_schema(self.config.require_database())
            await self._pool.open(wait=False)
        self._pool_users += 1
        try:
            yield self._pool
        finally:
            self._pool_users -= 1
            if owned and self._pool_users == 0:
                await self._pool.close()

    @contextlib.asynccontextmanager
    async def _side_queues(
        self, client: Client, queue: str, engine: _Engine
    ) -> AsyncIterator[None]:
        """The run's model-call and mirror queues (agentledger.core.fairness), served by workers
        of their own on a copy of the client without this plugin (so they stay bare), or by
        nobody here when `side_queues` is off."""
        if not self.config.side_queues:
            async with AgentWorkers(commit_pool=engine.parts.commit_pool):
                yield
            return
        options = client.config(active_config=True)
        options["plugins"] = []
        bare = Client(**options)
        _, model_slots, mirror_slots = slot_shares(activity_slots_for(self._pool, ACTIVITY_SLOTS))
        beside = engine.beside
        if "tuner" not in beside:
            model = {**beside, "max_concurrent_activities": model_slots}
            mirror = {**beside, "max_concurrent_activities": mirror_slots}
        else:
            model = mirror = beside
        engine.side_workers = side_queue_workers(
            bare, queue, engine.parts, model=model, mirror=mirror
        )
        async with AgentWorkers(*engine.side_workers, commit_pool=engine.parts.commit_pool):
            yield
