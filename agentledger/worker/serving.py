"""What a process does around the workers that serve a task queue: before they poll, the
search attributes, the tools' tables, the queue's tool set and the tenants' weights; while
they poll, the tool-set heartbeat and the fleet gauges; after, leaving the tool set.
`run_worker` and the plugin (agentledger.worker.plugin) both serve through here."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client
from temporalio.service import RPCError

from agentledger.core import search_attributes
from agentledger.core.background import alongside
from agentledger.store import tool_sets
from agentledger.store.db import install_tool_schema
from agentledger.store.tenant_store import TenantStore
from agentledger.temporal.queue_config import apply_queue_config
from agentledger.tools import ToolRegistry
from agentledger.worker import fleet_gauges

log = logging.getLogger(__name__)


async def register_search_attributes(client: Client) -> None:
    """Register the runs' search attributes; a server that refuses leaves runs unindexed."""
    try:
        await search_attributes.register(client)
    except RPCError as err:
        log.warning(
            "could not register search attributes (%s); register them by hand, or "
            "start runs with AGENTLEDGER_SEARCH_ATTRIBUTES=0",
            err.message,
        )


@contextlib.asynccontextmanager
async def serving(
    client: Client,
    pool: AsyncConnectionPool,
    task_queue: str,
    identity: str,
    registry: ToolRegistry,
) -> AsyncIterator[None]:
    """Join `task_queue` with `registry`'s tools for the life of the block (a worker with
    other tools there refuses: agentledger.store.tool_sets)."""
    await install_tool_schema(pool, registry.schema())
    await tool_sets.join(pool, task_queue, identity, registry.names())
    await _push_tenant_config(client, pool, task_queue)
    async with (
        alongside(tool_sets.keep_alive(pool, task_queue, identity)),
        alongside(fleet_gauges.publish(pool, fleet_gauges.meter_of(client))),
    ):
        yield
    await tool_sets.leave(pool, task_queue, identity)


async def _push_tenant_config(client: Client, pool: AsyncConnectionPool, task_queue: str) -> None:
    """Tenants' weights and model-call rates, from Postgres to the server (a new cluster)."""
    tenants = await TenantStore(pool).all_limits()
    try:
        rated = any(t.model_calls_per_second is not None for t in tenants)
        await apply_queue_config(client, task_queue, tenants, rated=rated)
    except RPCError as err:
        log.warning(
            "the server did not take tenants' weights and rates (%s); fairness weights and "
            "model-call rates are not enforced",
            err.message,
        )
