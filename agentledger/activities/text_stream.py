"""Model text to the run's subscribers, from inside `model.complete`, as the provider sends it.

Each piece goes to Postgres (agentledger.store.model_text): appended to the attempt's row
and sent on the run's channel in one statement, so subscribers (`watch`, SSE, AG-UI) get it
within a round trip, never through the run's workflow (no signal, no history event, no
workflow task). One write is in flight at a time; what arrives meanwhile goes with the next,
so a fast provider costs a few writes a call, not one per piece. A retried attempt writes
its (empty) row first: subscribers then drop the text an earlier attempt sent and show the
retry's. Streaming is for watchers only: the reply the run acts on is the activity's result,
so a piece that cannot be written is given up on after a short while, never a reason to
fail the call; the step's row has the whole reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from agentledger.core.streamed_text import not_streamed_note, within_budget
from agentledger.store.model_text import ModelTextStore, TextNotice

log = logging.getLogger(__name__)

# A write that fails is tried again this long after, while the call lasts.
RETRY_SECONDS = 0.2
# When the call has its reply, what is still unwritten gets this long to land.
DRAIN_SECONDS = 2.0

TextSink = Callable[[str], None]


class TextPieces:
    """The sink for a reply's text: what fits in the watchers' budget is kept until written
    (`unsent`, from character `sent` of the attempt's text on)."""

    def __init__(self) -> None:
        self.unsent = ""
        self.sent = 0
        self.taken_chars = 0
        self.dropped = 0
        self.due = asyncio.Event()  # text waits to be written
        self.idle = asyncio.Event()  # everything taken so far is written

    def __call__(self, text: str) -> None:
        kept, dropped = within_budget(text, self.taken_chars)
        self.taken_chars += len(kept)
        self.dropped += dropped
        if kept:
            self.unsent += kept
            self.wake()

    def end(self) -> None:
        """No more text comes: the note for what the budget left out goes last."""
        if self.dropped:
            self.unsent += not_streamed_note(self.dropped)
            self.dropped = 0
        self.wake()

    def wake(self) -> None:
        self.idle.clear()
        self.due.set()


@contextlib.asynccontextmanager
async def text_pieces(
    texts: ModelTextStore, run_id: str, step_id: str, attempt: int, after_event: int
) -> AsyncIterator[TextPieces]:
    """A sink whose text is written to the attempt's row and sent to subscribers as it
    comes (each piece naming `after_event`, the run's last event when the call was
    scheduled); when the body ends, what is left is written before the block ends."""
    pieces = TextPieces()
    # A retry's row is written at once, even empty: the text of the attempt before is void.
    reset = attempt > 1

    async def write() -> None:
        nonlocal reset
        while True:
            await pieces.due.wait()
            pieces.due.clear()
            while pieces.unsent or reset:
                chunk = pieces.unsent
                try:
                    piece = TextNotice(step_id, attempt, pieces.sent, chunk, after_event)
                    await texts.append(run_id, piece)
                except Exception as err:  # only a watcher misses it, for now: try again
                    log.warning("model text for %s not written yet: %s", step_id, err)
                    await asyncio.sleep(RETRY_SECONDS)
                    continue
                reset = False
                pieces.unsent = pieces.unsent[len(chunk) :]
                pieces.sent += len(chunk)
            pieces.idle.set()

    writing = asyncio.create_task(write())
    pieces.wake()
    try:
        yield pieces
    except BaseException:
        writing.cancel()  # the call failed: what was written stays, and a retry replaces it
        with contextlib.suppress(asyncio.CancelledError):
            await writing
        raise
    pieces.end()
    try:
        await asyncio.wait_for(pieces.idle.wait(), DRAIN_SECONDS)
    except TimeoutError:
        log.warning("model text for %s: %d characters not written", step_id, len(pieces.unsent))
    finally:
        writing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writing
