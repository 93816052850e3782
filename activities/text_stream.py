"""Model text to the run's live stream, from inside `model.complete`, as the provider sends it.

Pieces are gathered for `TEXT_BATCH` and sent as one stream item in one signal to the run:
a model call adds at most one signal (a history event and the workflow task it wakes) per
`TEXT_BATCH` of streaming, plus one at its end, however many tokens it streams. Streaming
is for watchers only: the reply the run acts on is the activity's result, so a piece that
cannot be sent is dropped, never a reason to fail the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from datetime import timedelta

from temporalio import activity
from temporalio.contrib.workflow_streams import WorkflowStreamClient

from agentrun.core.constants import STREAM_TOPIC_TEXT
from agentrun.core.models import TextPiece

TEXT_BATCH = timedelta(milliseconds=250)
# Watchers get this much of a reply's text, at most: it goes into the run's history (the
# signals) and into each watcher's poll results, which Temporal caps in size. The step's
# output in the mirror has the whole reply.
MAX_STREAMED_CHARS = 32_000
log = logging.getLogger(__name__)

TextSink = Callable[[str], None]


@contextlib.asynccontextmanager
async def text_pieces(step_id: str) -> AsyncIterator[TextSink]:
    """A sink for the reply's text; what it gets is published in batches, and the rest on
    exit."""
    buffer: list[str] = []
    budget = MAX_STREAMED_CHARS
    dropped = 0

    def take(text: str) -> None:
        nonlocal budget, dropped
        kept = text[:budget]
        budget -= len(kept)
        dropped += len(text) - len(kept)
        if kept:
            buffer.append(kept)

    try:
        client = WorkflowStreamClient.from_within_activity(batch_interval=TEXT_BATCH)
    except RuntimeError:  # not run by a workflow (a standalone call): nobody to stream to
        yield take
        return
    topic = client.topic(STREAM_TOPIC_TEXT, type=TextPiece)
    attempt = activity.info().attempt

    async def send() -> None:
        if not buffer:
            return
        text = "".join(buffer)
        buffer.clear()
        topic.publish(TextPiece(step_id=step_id, attempt=attempt, text=text))
        try:
            await client.flush()
        except Exception as err:  # the run stays right; only a watcher misses this piece
            log.warning("model text for %s not streamed: %s", step_id, err)

    async def pump() -> None:
        while True:
            await asyncio.sleep(TEXT_BATCH.total_seconds())
            await send()

    pumping = asyncio.create_task(pump())
    try:
        yield take
    finally:
        pumping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pumping
        if dropped:
            buffer.append(f"\n[{dropped:,} more characters not streamed; the step has them all]")
        await send()
