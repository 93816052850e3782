"""The throwaway stack the history-recording scripts run their scenarios on."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable
from typing import Any

import openai
import pgserver
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

import agentledger.demo
from agentledger.core import fairness, search_attributes
from agentledger.core.config import AgentLedgerConfig
from agentledger.dev.offline_model import OfflineModelServer, Reply
from agentledger.store.db import install_tool_schema, open_pool
from agentledger.tools import ToolRegistry
from agentledger.worker.worker_factory import WorkerDeps, build_worker


@contextlib.asynccontextmanager
async def recording_worker(
    model: Callable[[dict[str, Any]], Reply],
    task_queue: str,
    registry: ToolRegistry | None = None,
    pools: list[AsyncConnectionPool] | None = None,
) -> AsyncIterator[Client]:
    """An in-memory Temporal dev server, embedded Postgres, `model` offline and a worker
    serving the demo's tools, or `registry`'s; the Postgres pool goes into `pools`, for
    scenarios that set what lives there (a tenant's rate)."""
    registry = registry or agentledger.demo.registry
    pg = pgserver.get_server(tempfile.mkdtemp(prefix="agentledger-record-"), cleanup_mode="delete")
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=shutil.which("temporal"),
        data_converter=pydantic_data_converter,
        search_attributes=search_attributes.ALL,
        dev_server_extra_args=fairness.dev_server_flags(),
    )
    pool = await open_pool(pg.get_uri())
    await install_tool_schema(pool, registry.schema())
    if pools is not None:
        pools.append(pool)
    try:
        with OfflineModelServer(model) as server:
            settings = AgentLedgerConfig.load({}).model_copy(update=dict(task_queue=task_queue))
            deps = WorkerDeps(
                pool=pool,
                model_client=openai.AsyncOpenAI(
                    base_url=server.base_url, api_key="x", max_retries=0
                ),
                registry=registry,
            )
            async with build_worker(env.client, settings, deps):
                yield env.client
    finally:
        await pool.close()
        await env.shutdown()
        pg.cleanup()
