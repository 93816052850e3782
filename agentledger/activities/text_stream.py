"""Model text to the run's live stream, from inside `model.complete`, while the provider is
still sending it.

Pieces are gathered for `TEXT_BATCH` and sent as one stream item in one signal to the run:
a model call adds at most one signal (a history event and the workflow task it wakes) per
`TEXT_BATCH` of streaming, and none for a reply that comes faster than that. What has not
been sent when the call ends is not signalled: the call's result says how much was
(`streamed_chars`), and the workflow publishes the rest into its own stream when it takes
the result, which adds nothing to history. Streaming is for watchers only: the reply the
run acts on is the activity's result, so a piece that cannot be sent is dropped, never a
reason to fail the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from datetime import timedelta

from temporalio import activity
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from agentledger.core.constants import STREAM_TOPIC_TEXT
from agentledger.core.streamed_text import within_budget
from agentledger.core.wire import TextPiece

TEXT_BATCH = timedelta(milliseconds=250)
log = logging.getLogger(__name__)

TextSink = Callable[[str], None]


class TextPieces:
    """The sink for a reply's text; `streamed_chars` says how much of it went to the
    stream (sent, or given up on), so the workflow publishes only the rest."""

    def __init__(self) -> None:
        self.buffer: list[str] = []
        self.streamed_chars = 0
        self.taken_chars = 0

    def __call__(self, text: str) -> None:
        kept, _ = within_budget(text, self.taken_chars)
        self.taken_chars += len(kept)
        if kept:
            self.buffer.append(kept)

    def due(self) -> str:
        text = "".join(self.buffer)
        self.buffer.clear()
        return text


@contextlib.asynccontextmanager
async def text_pieces(step_id: str) -> AsyncIterator[TextPieces]:
    """A sink whose text is published every `TEXT_BATCH` while the call lasts; what is left
    when it ends stays for the workflow."""
    pieces = TextPieces()
    try:
        client = WorkflowStreamClient.from_within_activity(batch_interval=TEXT_BATCH)
    except RuntimeError:  # not run by a workflow (a standalone call): nobody to stream to
        yield pieces
        return
    topic = client.topic(STREAM_TOPIC_TEXT, type=TextPiece)
    attempt = activity.info().attempt
    ended = asyncio.Event()

    async def send() -> None:
        text = pieces.due()
        if not text:
            return
        # Counted before the signal: a piece whose signal fails is dropped for watchers,
        # never published twice.
        pieces.streamed_chars += len(text)
        topic.publish(TextPiece(step_id=step_id, attempt=attempt, text=text))
        try:
            await client.flush()
        except Exception as err:  # the run stays right; only a watcher misses this piece
            log.warning("model text for %s not streamed: %s", step_id, err)

    async def pump() -> None:
        while not ended.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ended.wait(), TEXT_BATCH.total_seconds())
            if not ended.is_set():
                await send()

    pumping = asyncio.create_task(pump())
    try:
        yield pieces
    except BaseException:
        pumping.cancel()  # the call failed: its result, and the rest of the text, never come
        with contextlib.suppress(asyncio.CancelledError):
            await pumping
        raise
    # A piece being signalled right now finishes first, so `streamed_chars` is exact.
    ended.set()
    await pumping
