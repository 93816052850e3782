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

from agentledger.core.background import alongside
from agentledger.store.mirror_store import MirrorStore

T = TypeVar("T")


def heartbeat(*details: object) -> None:
    """Tell Temporal the attempt lives. A local activity has no heartbeat (Temporal refuses
    one, and logs a warning for each): the workflow task it runs in is its lease."""
    if not activity.info().is_local:
        activity.heartbeat(*details)


def beat_interval(heartbeat_seconds: float) -> float:
    """Three heartbeats per timeout: one late beat does not lose the lease."""
    return max(heartbeat_seconds / 3, 0.2)


@contextlib.asynccontextmanager
async def heartbeating(
    heartbeat_seconds: float, on_beat: Callable[[], Awaitable[None]] | None = None
) -> AsyncIterator[None]:
    """Heartbeat in the background while the body runs; `on_beat` runs after each beat."""

    async def beat() -> None:
        while True:
            await asyncio.sleep(beat_interval(heartbeat_seconds))
            heartbeat()
            if on_beat is not None:
                await on_beat()

    async with alongside(beat()):
        yield


@contextlib.asynccontextmanager
async def hold_lease(
    store: MirrorStore, *, run_id: str, step_id: str, heartbeat_seconds: float
) -> AsyncIterator[None]:
    attempt = activity.info().attempt

    async def renew() -> None:
        try:
            await store.renew_lease(
                run_id=run_id, step_id=step_id, attempt=attempt, lease_seconds=heartbeat_seconds
            )
        except Exception as err:  # the mirror lagging must not cost the attempt its lease
            activity.logger.warning("could not renew the mirrored lease: %s", err)

    async with heartbeating(heartbeat_seconds, renew):
        yield


async def once_postgres_answers(
    operation: Callable[[], Awaitable[T]], heartbeat_seconds: float
) -> T:
    """Run `operation`, waiting out a Postgres outage while heartbeating.

    The worker is alive, so the attempt keeps its lease: an outage costs the step time,
    not retry attempts, and the step goes on as soon as the database is back.
    """
    async with heartbeating(heartbeat_seconds):
        while True:
            try:
                return await operation()
            except (psycopg.OperationalError, PoolTimeout) as err:
                activity.logger.warning("Postgres is unavailable, waiting for it: %s", err)
                await asyncio.sleep(beat_interval(heartbeat_seconds))
