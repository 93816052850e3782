"""The event streams open now: each credential's share (at most `per_credential` at once),
and each stream ended within a second of its credential's end, a key revoked or expired
or a token past its expiry. A stream checked its credential only when it opened; a
revoked key's stream would go on delivering to the end of the run.

One watcher checks the keys of all open streams together every `CHECK_SECONDS` (one
query, however many streams), and runs only while a stream is open.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar

from agentledger.core.access import Caller
from agentledger.http.errors import HttpRefusal

log = logging.getLogger(__name__)

T = TypeVar("T")
CHECK_SECONDS = 0.25
# The keys (by id) of a list that no longer open the door.
ClosedKeys = Callable[[list[str]], Awaitable[set[str]]]


@dataclass(eq=False)
class OpenStream:
    who: Caller
    ended: bool = False
    why: str = ""
    # The wait for the stream's next item, cut short when the stream ends.
    waiting: asyncio.Timeout | None = field(default=None, repr=False)

    def end(self, why: str) -> None:
        self.why, self.ended = why, True
        if self.waiting is not None:
            self.waiting.reschedule(asyncio.get_running_loop().time())


class Streams:
    def __init__(self, per_credential: int, closed_keys: ClosedKeys) -> None:
        self.limit = per_credential
        self.closed_keys = closed_keys
        self.open: set[OpenStream] = set()
        self.counts: Counter[str] = Counter()
        self.watcher: asyncio.Task[None] | None = None

    def take(self, who: Caller) -> OpenStream:
        """One more stream of `who`'s (`give_back` when it ends); 429 past the limit."""
        if self.counts[who.credential] >= self.limit:
            raise HttpRefusal(
                429,
                "too_many_streams",
                f"{self.limit} event streams are open with this credential already; close "
                "one, then retry",
                {"Retry-After": "1"},
            )
        stream = OpenStream(who)
        self.counts[who.credential] += 1
        self.open.add(stream)
        if self.watcher is None or self.watcher.done():
            self.watcher = asyncio.create_task(self.watch())
        return stream

    def give_back(self, stream: OpenStream) -> None:
        if stream not in self.open:
            return
        self.open.discard(stream)
        self.counts[stream.who.credential] -= 1
        if not self.counts[stream.who.credential]:
            del self.counts[stream.who.credential]

    async def watch(self) -> None:
        """End the streams whose credential has ended, until none is open."""
        while self.open:
            await asyncio.sleep(CHECK_SECONDS)
            try:
                await self.check()
            except Exception:
                # The database did not answer: the streams go on, checked again shortly.
                log.warning("could not check the open streams' keys", exc_info=True)

    async def check(self) -> None:
        now = datetime.now(UTC)
        for stream in list(self.open):
            expires = stream.who.expires_at
            if expires is not None and expires <= now:
                stream.end("the credential has expired")
        keys = sorted({s.who.key_id for s in self.open if s.who.key_id is not None})
        if not keys:
            return
        closed = await self.closed_keys(keys)
        for stream in list(self.open):
            if stream.who.key_id in closed:
                stream.end("the key was revoked or has expired")

    async def follow(self, stream: OpenStream, items: AsyncIterator[T]) -> AsyncIterator[T]:
        """`items` until they end or the stream's credential does; then the stream's share
        is given back and `items` closed. Only the wait for the next item is cut short:
        nothing is interrupted while the caller handles an item."""
        try:
            while not stream.ended:
                try:
                    async with asyncio.timeout(None) as waiting:
                        stream.waiting = waiting
                        item = await anext(items)
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    if stream.ended:
                        return
                    raise
                finally:
                    stream.waiting = None
                yield item
        finally:
            self.give_back(stream)
            aclose = getattr(items, "aclose", None)
            if aclose is not None:
                await aclose()
