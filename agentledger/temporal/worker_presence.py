"""Whether any worker serves a task queue, and calls that give up instead of hanging.

Queries and updates need a worker; when none runs they wait for one, so every call that may
need a worker goes through `within`, and a refusal names who last polled (the server's
DescribeTaskQueue) and how to start a worker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client
from temporalio.service import RPCError

from agentledger.core.advice import start_a_worker as start_a_worker

# Re-exported: the operations' default bound (it lives in the core, so the CLI's parser can
# name it without importing Temporal).
from agentledger.core.constants import DEFAULT_WAIT_SECONDS as DEFAULT_WAIT_SECONDS

# A live worker long-polls without pause (a poll lasts about a minute when idle), so a poller
# the server last heard from longer ago than this has gone; a younger one may have just died.
POLL_FRESH_SECONDS = 75.0

T = TypeVar("T")


class NoAnswer(Exception):
    """No worker answered within the bound."""


async def within(seconds: float, call: Awaitable[T]) -> T:
    """`call`, or NoAnswer after `seconds`: the server may hold a query longer than asked."""
    try:
        return await asyncio.wait_for(call, max(seconds, 0.1))
    except TimeoutError as err:
        raise NoAnswer from err


class Deadline:
    """One bound for a whole command, shared out among the calls it makes."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._end = asyncio.get_running_loop().time() + seconds

    def left(self) -> float:
        return max(self._end - asyncio.get_running_loop().time(), 0.1)

    def ended(self) -> bool:
        return asyncio.get_running_loop().time() >= self._end

    def spent(self) -> float:
        return self.seconds - (self._end - asyncio.get_running_loop().time())

    def share(self, fraction: float) -> float:
        """At most `fraction` of the bound, leaving the rest for what follows."""
        return min(self.left(), self.seconds * fraction)


@dataclass(frozen=True)
class Poller:
    identity: str
    last_poll: datetime | None

    def age_seconds(self, now: datetime) -> float | None:
        return None if self.last_poll is None else (now - self.last_poll).total_seconds()

    def fresh(self, now: datetime) -> bool:
        age = self.age_seconds(now)
        return age is not None and age <= POLL_FRESH_SECONDS


async def pollers(client: Client, task_queue: str, *, seconds: float) -> list[Poller]:
    """The workers the server has seen polling `task_queue` for workflow tasks lately."""
    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    )
    response = await within(
        seconds,
        client.workflow_service.describe_task_queue(
            request, timeout=timedelta(seconds=max(seconds, 0.1))
        ),
    )
    return [
        Poller(
            identity=p.identity,
            last_poll=p.last_access_time.ToDatetime(tzinfo=UTC)
            if p.HasField("last_access_time")
            else None,
        )
        for p in response.pollers
    ]


async def pollers_or_unknown(client: Client, task_queue: str, *, seconds: float) -> list[Poller]:
    """`pollers`, or none when the server cannot say in time (a refusal then says so)."""
    try:
        return await pollers(client, task_queue, seconds=seconds)
    except (NoAnswer, RPCError):
        return []


async def fresh_pollers(client: Client, task_queue: str, *, seconds: float) -> list[Poller]:
    """The pollers of `task_queue`, asked again for up to `seconds` until one is fresh: a
    worker that has just started takes a moment to send its first poll."""
    end = asyncio.get_running_loop().time() + seconds
    while True:
        found = await pollers_or_unknown(client, task_queue, seconds=seconds)
        now = datetime.now(UTC)
        if any(p.fresh(now) for p in found) or asyncio.get_running_loop().time() >= end:
            return found
        await asyncio.sleep(0.2)


def describe_pollers(task_queue: str, found: list[Poller], now: datetime | None = None) -> str:
    """Who polls `task_queue`, for a person: "none", or identities and how long ago."""
    now = now or datetime.now(UTC)
    if not found:
        return f"no worker polls task queue {task_queue!r}"
    heard = ", ".join(
        f"{p.identity} {age:.0f}s ago" if (age := p.age_seconds(now)) is not None else p.identity
        for p in found
    )
    return f"task queue {task_queue!r} last polled by {heard}"


def no_worker(task_queue: str, found: list[Poller], seconds: float) -> str:
    """Why nothing answered, and what to do, in one sentence. A worker heard from lately may
    be busy, or the run's next task may still wait on a worker that stopped (Temporal hands it
    on after the worker's sticky timeout, 10 s by default)."""
    now = datetime.now(UTC)
    lately = (
        "if a worker runs, it may be busy or waiting out a task held by one that stopped "
        "(about 10 s): try again with a longer --wait; else "
        if any(p.fresh(now) for p in found)
        else ""
    )
    return (
        f"no worker answered within {seconds:g}s ({describe_pollers(task_queue, found, now)}); "
        f"{lately}{start_a_worker(task_queue)}"
    )
