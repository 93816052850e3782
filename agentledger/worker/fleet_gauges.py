"""The fleet's gauges, published by every worker through its Temporal runtime's meter:
approvals waiting for a person and the age of the oldest, by tenant. Read from the mirror
every GAUGE_SECONDS; a failed read skips one publication, never the worker."""

from __future__ import annotations

import asyncio
import logging

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client
from temporalio.common import MetricMeter
from temporalio.runtime import Runtime

from agentledger.store.live_gauges import pending_approvals

APPROVALS_PENDING = "agentledger_approvals_pending"
APPROVAL_OLDEST_AGE = "agentledger_approval_oldest_age_seconds"
GAUGE_SECONDS = 15.0

log = logging.getLogger(__name__)


def meter_of(client: Client) -> MetricMeter:
    """The meter of the runtime the client (and so its workers) report through."""
    return (client.service_client.config.runtime or Runtime.default()).metric_meter


async def publish_once(pool: AsyncConnectionPool, meter: MetricMeter, seen: set[str]) -> None:
    """Set the gauges; a tenant whose approvals were all decided since drops back to 0."""
    pending = meter.create_gauge(APPROVALS_PENDING, "approvals waiting for a person")
    oldest = meter.create_gauge_float(
        APPROVAL_OLDEST_AGE, "how long the oldest waiting approval has waited", "s"
    )
    rows = {row["tenant"]: row for row in await pending_approvals(pool)}
    for tenant in seen | set(rows):
        row = rows.get(tenant)
        pending.set(int(row["pending"]) if row else 0, {"tenant": tenant})
        oldest.set(float(row["oldest_seconds"] or 0.0) if row else 0.0, {"tenant": tenant})
    seen |= set(rows)


async def publish(pool: AsyncConnectionPool, meter: MetricMeter) -> None:
    """Publish the gauges until cancelled (the worker's life)."""
    seen: set[str] = set()
    while True:
        try:
            await publish_once(pool, meter, seen)
        except Exception as err:  # the mirror is down or slow: the next round tries again
            log.warning("approval gauges not published: %s", err)
        await asyncio.sleep(GAUGE_SECONDS)
