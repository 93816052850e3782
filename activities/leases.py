"""A step's lease: Temporal heartbeats, mirrored into Postgres as `steps.lease_until`.

Temporal's heartbeat timeout is the real lease (it decides when an attempt is lost); the
mirror copy lets SQL answer "which worker holds this step, until when".
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import psycopg
from psycopg_pool import PoolTimeout
from temporalio import activity

from agentrun.mirror_store import MirrorStore

T = TypeVar("T")


@contextlib.asynccontextmanager
async def hold_lease(
    store: MirrorStore, *, run_id: str, step_id: str, heartbeat_seconds: float
) -> AsyncIterator[None]:
    attempt = activity.info().attempt
    interval = max(heartbeat_seconds / 3, 0.2)

    async def beat() -> None:
        while True:
            await asyncio.sleep(interval)
            activity.heartbeat()
            try:
                await store.renew_lease(
                    run_id=run_id,
                    step_id=step_id,
                    attempt=attempt,
                    lease_seconds=heartbeat_seconds,
                )
            except Exception as err:  # the mirror lagging must not cost the attempt its lease
                activity.logger.warning("could not renew the mirrored lease: %s", err)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


async def once_postgres_answers(
    operation: Callable[[], Awaitable[T]], heartbeat_seconds: float
) -> T:
    """Run `operation`, waiting out a Postgres outage while heartbeating.

    The worker is alive, so the attempt keeps its lease: an outage costs the step time,
    not retry attempts, and the step goes on as soon as the database is back.
    """
    interval = max(heartbeat_seconds / 3, 0.2)

    async def beat() -> None:
        while True:
            await asyncio.sleep(interval)
            activity.heartbeat()

    task = asyncio.create_task(beat())
    try:
        while True:
            try:
                return await operation()
            except (psycopg.OperationalError, PoolTimeout) as err:
                activity.logger.warning("Postgres is unavailable, waiting for it: %s", err)
                await asyncio.sleep(interval)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
