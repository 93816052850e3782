"""Follow a run as it works: its events and its model's text as they happen, then its receipt.

A live run is read from its workflow stream (`temporalio.contrib.workflow_streams`): the
workflow publishes every event it mirrors. Offsets are global and survive continue-as-new,
so a watcher that joins late replays from offset 0 (or any offset) and sees the same
sequence as one that watched from the start. The model's text comes from Postgres, as
`model.complete` writes it, never through the run (agentledger.client.live_text; runs
whose calls streamed through the run's stream still show it from there). An ended run's
story is read from the Postgres mirror instead.

Watchers read the stream with its poll *query*, never its long-poll update: the server
admits about ten updates in flight per workflow (and a bounded total per run), and those
belong to people's decisions and controls. A query takes no slot and adds nothing to the
run's history, so any number of watchers can follow a run without starving an approval.
The price is a poll: at once while items come, backing off to `IDLE_POLL_SECONDS` while
the run is quiet.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from datetime import timedelta
from typing import Any

from psycopg_pool import AsyncConnectionPool
from temporalio.api.common.v1 import Payload
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowQueryFailedError,
    WorkflowQueryRejectedError,
)
from temporalio.contrib.workflow_streams import PollInput, PollResult, WorkflowStreamItem
from temporalio.service import RPCError, RPCStatusCode

from agentledger.client import live_text
from agentledger.client.receipts import receipt_of
from agentledger.client.scope import Scope, no_run
from agentledger.core.constants import STREAM_TOPIC_EVENTS, STREAM_TOPIC_RETRIES, STREAM_TOPIC_TEXT
from agentledger.core.errors import InvalidRequest, NotAnswered, OperationError
from agentledger.core.events import EventType
from agentledger.core.results import WatchItem
from agentledger.core.spec import JsonDict
from agentledger.core.wire import RetryNote, RunEvent, TextPiece

# After a worker crash or a server restart a subscription fails; it resumes from the next
# offset it has not seen, this long after, for as long as the run is open.
RESUBSCRIBE_SECONDS = 0.5
# The receipt is written before the workflow returns; this bounds the wait for its row.
RECEIPT_WAIT_SECONDS = 10.0
# An ended run's last stream read is tried again for this long before the mirror gives the rest.
FINAL_READ_SECONDS = 10.0
# A quiet run is polled less and less often, down to once per this long.
IDLE_POLL_SECONDS = 1.0
# One poll's bound: a query waits for a worker, and a busy one answers late.
POLL_RPC_SECONDS = 10.0
# The stream's own read: the library registers it beside its long-poll update, same name.
STREAM_POLL_QUERY = "__temporal_workflow_stream_poll"
TOPICS = [STREAM_TOPIC_EVENTS, STREAM_TOPIC_TEXT, STREAM_TOPIC_RETRIES]


async def watch(
    scope: Scope,
    run_id: str,
    *,
    from_offset: int = 0,
    wait: float | None = None,
    poll_cooldown: timedelta = timedelta(milliseconds=100),
) -> AsyncIterator[WatchItem]:
    """Every item of the run from `from_offset` on, live, ending with its receipt; only a
    run the caller sees (another tenant's reads as missing).

    Without a database the items end at the run's last event (the receipt lives in
    Postgres), and an ended run cannot be read (its story is in the mirror).
    """
    if from_offset < 0:
        raise InvalidRequest("--from takes an offset of 0 or more")
    await scope.check_visible(run_id, wait)
    client = await scope.temporal(scope.bound(wait))
    pool = await scope.mirror()
    if not await _is_open(client, run_id):
        if pool is None:
            raise NotAnswered(
                f"run {run_id} has ended; its story is in the mirror: set DATABASE_URL"
            )
        ended = await live_text.of_ended_run(pool, run_id)
        async for item in ended.around(mirror_story(pool, run_id, after_seq=from_offset)):
            yield item
        return
    cooldown = poll_cooldown.total_seconds()
    if pool is None:
        async for raw in _follow(client, run_id, from_offset, cooldown):
            yield stream_item(raw)
        return
    last_seq = 0
    live = live_text.for_run(pool, run_id)
    follow = _follow(client, run_id, from_offset, cooldown, live.events_wanted)
    async for item in live_text.merged(live, pool, follow, stream_item):
        last_seq = item.seq or last_seq
        yield item
    if last_seq or from_offset == 0:
        # The events the stream's last reads could not give (an ended run is read by a
        # replay, which may fail under load), from the mirror, which holds every one.
        async for item in live.around(mirror_story(pool, run_id, after_seq=last_seq)):
            yield item
    else:
        yield await _receipt_item(pool, run_id)


async def _follow(
    client: Client, run_id: str, offset: int, cooldown: float, wake: asyncio.Event | None = None
) -> AsyncGenerator[WorkflowStreamItem[Any]]:
    """The stream's items from `offset` on while the run is open, then what it published
    before it ended; `wake` set polls at once instead of after the pause. A query to the
    workflow id reaches its latest generation, so this follows continue-as-new; a failed
    poll (a worker died, the server restarted) is tried again from the same offset."""
    wake = wake or asyncio.Event()
    handle = client.get_workflow_handle(run_id)
    converter = client.data_converter.payload_converter
    loop = asyncio.get_running_loop()
    pause = cooldown
    ended = False
    give_up = float("inf")
    while True:
        try:
            result: PollResult = await handle.query(
                STREAM_POLL_QUERY,
                PollInput(topics=TOPICS, from_offset=offset),
                result_type=PollResult,
                rpc_timeout=timedelta(seconds=POLL_RPC_SECONDS),
            )
        except (RPCError, WorkflowQueryFailedError, WorkflowQueryRejectedError):
            ended = ended or not await _is_open(client, run_id)
            if ended:
                # Its last items are read from a replay of the ended run; try again for a
                # while, then leave the rest to the mirror.
                give_up = min(give_up, loop.time() + FINAL_READ_SECONDS)
                if loop.time() > give_up:
                    return
            await asyncio.sleep(RESUBSCRIBE_SECONDS)
            continue
        for wire in result.items:
            payload = Payload()
            payload.ParseFromString(base64.b64decode(wire.data))
            yield WorkflowStreamItem(
                topic=wire.topic, data=converter.from_payload(payload), offset=wire.offset
            )
        offset = max(offset, result.next_offset)
        if result.more_ready:
            continue
        if ended:
            return
        if result.items:
            pause = cooldown
        else:
            # Read once more after the run ends: it may have published since this poll.
            ended = not await _is_open(client, run_id)
            pause = min(max(pause * 2, cooldown), IDLE_POLL_SECONDS)
        if not ended:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), pause)
            if wake.is_set():  # something waits for the run's newest events: poll now
                wake.clear()
                pause = cooldown


def stream_item(raw: WorkflowStreamItem[Any]) -> WatchItem:
    if raw.topic == STREAM_TOPIC_RETRIES:
        note = RetryNote.model_validate(raw.data)
        return WatchItem(
            kind="event",
            type=EventType.STEP_RETRY,
            offset=raw.offset,
            step_id=note.step_id,
            data={"attempt": note.attempt, "reason": note.reason},
        )
    if raw.topic == STREAM_TOPIC_TEXT:
        piece = TextPiece.model_validate(raw.data)
        return WatchItem(
            kind="text",
            type=EventType.MODEL_TEXT,
            offset=raw.offset,
            step_id=piece.step_id,
            data={"attempt": piece.attempt},
            text=piece.text,
        )
    event = RunEvent.model_validate(raw.data)
    return _event_item(event, offset=raw.offset)


def _event_item(event: RunEvent, *, offset: int | None) -> WatchItem:
    return WatchItem(
        kind="event",
        type=event.type,
        offset=offset,
        seq=event.seq,
        step_id=event.step_id,
        data=event.data,
        at=event.at,
    )


async def mirror_story(
    pool: AsyncConnectionPool, run_id: str, *, after_seq: int = 0
) -> AsyncIterator[WatchItem]:
    """An ended run's events as the mirror holds them, then its receipt (waited for first:
    it is written with the run's last rows)."""
    receipt = await _receipt_item(pool, run_id)
    async with pool.connection() as conn:
        cur = await conn.execute(
            """SELECT seq, type, step_id, data, created_at FROM events
               WHERE run_id = %s AND seq > %s ORDER BY seq""",
            (run_id, after_seq),
        )
        rows = await cur.fetchall()
    for seq, type_, step_id, data, at in rows:
        event = RunEvent(seq=seq, type=type_, step_id=step_id, data=data, at=at)
        yield _event_item(event, offset=None)
    yield receipt


async def _receipt_item(pool: AsyncConnectionPool, run_id: str) -> WatchItem:
    deadline = asyncio.get_running_loop().time() + RECEIPT_WAIT_SECONDS
    while True:
        try:
            receipt: JsonDict = await receipt_of(pool, run_id)
            break
        except OperationError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.2)
    return WatchItem(kind="receipt", type=EventType.RECEIPT, data=receipt)


async def _is_open(client: Client, run_id: str) -> bool:
    try:
        description = await client.get_workflow_handle(run_id).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise no_run(run_id) from err
        raise
    return description.status == WorkflowExecutionStatus.RUNNING
