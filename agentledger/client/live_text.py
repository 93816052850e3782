"""A run's model text in its watched story: from Postgres as it streams, each piece once.

`model.complete` writes each piece of a reply to its attempt's row and sends it on the run's
channel (agentledger.store.model_text). A watcher listens before it reads anything, and
merges what it hears into the events it follows:
- a piece is shown once the watcher has shown every event the run had recorded when the
  call was scheduled (the piece names the last, `after_event`): the text is faster than the
  run's events, and would otherwise come before the step's start, or among old events for a
  watcher that joined late; a piece held for that wakes the watcher's poll of the events.
  A piece that does not follow what was shown (a notice missed, held back, or joined
  mid-reply) is read from the row instead, so nothing shows twice or is skipped;
- a piece of a higher attempt than the one shown replaces it: the watcher gets a
  `model.text_reset` item (kind `text_reset`), then the retry's text; a piece of a lower
  attempt (one still running after its lease was lost) is dropped;
- before the event that ends a model call's step, the step's text is completed from the row,
  so the text comes before the step's end however the notices went, and nothing of that
  step shows after it. An ended run's story, read from the mirror, gets its text this way.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from psycopg_pool import AsyncConnectionPool

from agentledger.core.events import EventType
from agentledger.core.results import WatchItem
from agentledger.store.model_text import AttemptText, ModelTextStore, TextNotice, listener_for


def ends_a_step(item: WatchItem) -> bool:
    """A step's record: `step.completed`, `step.failed`, ... (not a retry's note)."""
    return (
        item.kind == "event"
        and item.type.startswith("step.")
        and item.type != EventType.STEP_RETRY
        and item.step_id is not None
    )


class LiveText:
    """The text one watcher has been shown of each step, and what to show next."""

    def __init__(self, texts: ModelTextStore, run_id: str) -> None:
        self.texts = texts
        self.run_id = run_id
        self.shown_seq = 0  # the last event shown
        self.held: dict[str, int] = {}  # step: the event its pieces wait for
        self.shown: dict[str, tuple[int, int]] = {}  # step: (attempt, characters shown)
        self.ended: set[str] = set()
        self.known: dict[str, AttemptText] | None = None  # an ended run's rows, read at once
        self.events_wanted = asyncio.Event()  # a piece waits for events not yet read

    def _show(self, step_id: str, attempt: int, offset: int, text: str) -> list[WatchItem] | None:
        """The items that show `text` (at `offset` of the attempt's text); None if it does
        not reach what was shown (read the row)."""
        if step_id in self.ended:
            return []
        shown_attempt, chars = self.shown.get(step_id, (0, 0))
        if attempt < shown_attempt:
            return []
        items = []
        if attempt > shown_attempt:
            if chars:
                items.append(
                    WatchItem(
                        kind="text_reset",
                        type=EventType.MODEL_TEXT_RESET,
                        step_id=step_id,
                        data={"attempt": attempt, "replaces": shown_attempt},
                    )
                )
            shown_attempt, chars = attempt, 0
        if offset > chars:
            return None
        new = text[chars - offset :]
        if new:
            items.append(
                WatchItem(
                    kind="text",
                    type=EventType.MODEL_TEXT,
                    step_id=step_id,
                    data={"attempt": attempt},
                    text=new,
                )
            )
        self.shown[step_id] = (shown_attempt, chars + len(new))
        return items

    async def _from_row(self, step_id: str) -> list[WatchItem]:
        row = (
            self.known.get(step_id)
            if self.known is not None
            else (await self.texts.latest(self.run_id, step_id)).get(step_id)
        )
        if row is None:
            return []
        return self._show(step_id, row.attempt, 0, row.text) or []

    async def heard(self, notice: TextNotice) -> list[WatchItem]:
        """What a notice shows now (nothing yet if an event before it is not shown yet)."""
        step_id = notice.step_id
        if step_id in self.ended:
            return []
        if notice.after_event > self.shown_seq or step_id in self.held:
            self.held[step_id] = max(notice.after_event, self.held.get(step_id, 0))
            self.events_wanted.set()
            return []
        if notice.text is not None:
            items = self._show(step_id, notice.attempt, notice.offset, notice.text)
            if items is not None:
                return items
        return await self._from_row(step_id)

    async def with_item(self, item: WatchItem) -> list[WatchItem]:
        """`item` with the text to show around it: all of its step's before it, if it ends
        a model call; after it, the text held for the event it is."""
        before = []
        step_id = item.step_id
        if step_id is not None and ends_a_step(item) and step_id not in self.ended:
            if item.data.get("type") == "model_call":
                before = await self._from_row(step_id)
            self.ended.add(step_id)
            self.held.pop(step_id, None)
        self.shown_seq = max(self.shown_seq, item.seq or 0)
        after = []
        for held in [s for s, seq in self.held.items() if seq <= self.shown_seq]:
            del self.held[held]
            after += await self._from_row(held)
        return [*before, item, *after]

    async def around(self, items: AsyncIterator[WatchItem]) -> AsyncIterator[WatchItem]:
        """`items` with each model call's text before its step's end."""
        async for item in items:
            for shown in await self.with_item(item):
                yield shown


def for_run(pool: AsyncConnectionPool, run_id: str) -> LiveText:
    return LiveText(ModelTextStore(pool), run_id)


async def of_ended_run(pool: AsyncConnectionPool, run_id: str) -> LiveText:
    """For an ended run's story: every step's text read at once."""
    live = for_run(pool, run_id)
    live.known = await live.texts.latest(run_id)
    return live


async def merged(
    live: LiveText,
    pool: AsyncConnectionPool,
    follow: AsyncGenerator[Any],
    to_item: Callable[[Any], WatchItem],
) -> AsyncIterator[WatchItem]:
    """What `follow` yields (each made a WatchItem by `to_item`), with the run's model text
    from Postgres merged in. The run's channel is listened to before `follow` is read, so
    no piece sent after that is missed; `follow` is read one item ahead at most, so a
    watcher that stops reading stops its polls too."""
    async with listener_for(pool).subscribe(live.run_id) as notices:
        event: asyncio.Future[Any] = asyncio.ensure_future(anext(follow))
        notice: asyncio.Future[TextNotice] = asyncio.ensure_future(notices.get())
        try:
            while True:
                await asyncio.wait({event, notice}, return_when=asyncio.FIRST_COMPLETED)
                if event.done():
                    try:
                        raw = event.result()
                    except StopAsyncIteration:
                        return
                    for item in await live.with_item(to_item(raw)):
                        yield item
                    event = asyncio.ensure_future(anext(follow))
                if notice.done():
                    for item in await live.heard(notice.result()):
                        yield item
                    notice = asyncio.ensure_future(notices.get())
        finally:
            for pending in (event, notice):
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await pending
            await follow.aclose()
