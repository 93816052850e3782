"""Group commit: writes that arrive together share one transaction.

Postgres pays for each commit (a WAL flush), and a worker pays for each transaction (a
connection from the pool, BEGIN and COMMIT, a round trip). Under load many runs' mirror
writes arrive at once; a writer commits them together while the next ones queue, so a
group grows with the load and an idle worker adds no delay: a write that arrives alone is
written alone, at once. `writers` groups may be in flight at once, so one slow commit does
not hold every write that arrives behind it (the order of two groups does not matter: each
write is an idempotent upsert, and an older snapshot of a row never wins over a newer one).

A group that fails (a row Postgres refuses, a connection lost) is written again one item
at a time, concurrently, so each caller gets its own item's outcome: one bad write never
fails the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

# Enough to carry every mirror write a worker's slots can have in flight in one transaction,
# few enough that one transaction stays short.
MAX_GROUP = 64
# Groups in flight at once: a second writer takes what arrives while the first one commits.
WRITERS = 2


@dataclass
class GroupCommitStats:
    """What the committer did, for tests and the benchmark: groups written, items in them."""

    groups: int = 0
    items: int = 0
    fallbacks: int = 0


@dataclass
class GroupCommit(Generic[T, R]):
    """Callers `await submit(item)`; it returns the item's result once a transaction holding
    the item committed.

    `write_group` writes several items in one transaction and returns their results in
    order; `write_one` writes one alone (also the path for an item that arrives alone, and
    for each item of a failed group).
    """

    write_group: Callable[[list[T]], Awaitable[list[R]]]
    write_one: Callable[[T], Awaitable[R]]
    max_group: int = MAX_GROUP
    writers: int = WRITERS
    stats: GroupCommitStats = field(default_factory=GroupCommitStats)
    _queue: list[tuple[T, asyncio.Future[R]]] = field(default_factory=list)
    _writers: set[asyncio.Task[None]] = field(default_factory=set)

    async def submit(self, item: T) -> R:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[R] = loop.create_future()
        done.add_done_callback(_retrieved)  # its caller may have stopped waiting
        self._queue.append((item, done))
        self._writers = {w for w in self._writers if not w.done() and w.get_loop() is loop}
        if len(self._writers) < self.writers:
            self._writers.add(loop.create_task(self._drain()))
        # A caller that stops waiting (its activity cancelled) does not stop the write: the
        # item may already be in a transaction with others, and every write is idempotent.
        return await asyncio.shield(done)

    async def _drain(self) -> None:
        group: list[tuple[T, asyncio.Future[R]]] = []
        try:
            while self._queue:
                group, self._queue = self._queue[: self.max_group], self._queue[self.max_group :]
                await self._write(group)
        except BaseException:  # the writer itself stopped (the loop closing): nobody waits for ever
            for _, done in group + self._queue:
                _fail(done, RuntimeError("the group writer stopped; retry the write"))
            self._queue = []
            raise

    async def _write(self, group: list[tuple[T, asyncio.Future[R]]]) -> None:
        if len(group) == 1:
            await self._alone(*group[0])
            return
        try:
            results = await self.write_group([item for item, _ in group])
        except Exception:
            self.stats.fallbacks += 1
            await asyncio.gather(*(self._alone(item, done) for item, done in group))
            return
        self.stats.groups += 1
        self.stats.items += len(group)
        for (_, done), result in zip(group, results, strict=True):
            _succeed(done, result)

    async def _alone(self, item: T, done: asyncio.Future[R]) -> None:
        try:
            result = await self.write_one(item)
        except Exception as err:
            _fail(done, err)
        else:
            self.stats.groups += 1
            self.stats.items += 1
            _succeed(done, result)


def _retrieved(done: asyncio.Future[Any]) -> None:
    if not done.cancelled():
        done.exception()


def _succeed(done: asyncio.Future[R], result: R) -> None:
    if not done.done():
        done.set_result(result)


def _fail(done: asyncio.Future[Any], error: Exception) -> None:
    if not done.done():
        done.set_exception(error)
