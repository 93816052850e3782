"""A turn of a conversation with a run (`agentrun chat`): send a message, follow its answer.

The message goes as `say` sends it (through the same door: another tenant's run reads as
missing), then the run's live stream (agentrun/ops/watch.py) is followed from where the run
received the message to where it answered it: a session's `session.turn_answered` naming
the message, or the run's end (and receipt). An approval the turn waits for ends the turn's
items with `chat.approval_pending`, so a caller can decide and follow on (`from_offset`).
Every wait is bounded: no worker to take the message, or nothing from the run for
`answer_within` seconds, ends the items with `chat.no_answer`, saying why and what to do.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client

from agentrun.core.results import WatchItem
from agentrun.ops import steering_ops, watch
from agentrun.temporal.worker_presence import DEFAULT_WAIT_SECONDS

# How long a turn may go without a word from the run before chat says so and returns.
ANSWER_WITHIN_SECONDS = 300.0
ENDS_RUN = {"run.finished", "receipt"}


def note(type: str, **data: object) -> WatchItem:
    return WatchItem(kind="event", type=type, data=dict(data))


async def chat(
    client: Client,
    run_id: str,
    text: str | None,
    *,
    by: str = "cli",
    from_offset: int = 0,
    wait: float = DEFAULT_WAIT_SECONDS,
    answer_within: float = ANSWER_WITHIN_SECONDS,
    tenant: str | None = None,
    mirror: AsyncConnectionPool | None = None,
) -> AsyncIterator[WatchItem]:
    """Say `text` to the run and yield what it does until it has answered it (None: follow
    the turn in progress from `from_offset`, e.g. after an approval)."""
    message_id: str | None = None
    if text is not None:
        said = await steering_ops.say(
            client, run_id, text, by=by, wait=wait, tenant=tenant, mirror=mirror
        )
        message_id = said.message_id
        yield note("chat.said", **said.model_dump(mode="json"))
        if said.delivered == "recorded":
            yield note(
                "chat.no_answer",
                reason="no_worker",
                note=f"no worker answered within {wait:g}s: the message is recorded and "
                f"run {run_id} takes it when a worker runs (`agentrun-worker`); "
                f"`agentrun watch {run_id}` follows it then",
            )
            return
    items = watch.watch(
        client,
        run_id,
        pool=mirror,
        from_offset=from_offset,
        poll_cooldown=timedelta(milliseconds=100),
        tenant=tenant,
    )
    following = message_id is None
    try:
        while True:
            try:
                item = await asyncio.wait_for(anext(items), answer_within)
            except StopAsyncIteration:
                return
            except TimeoutError:
                yield note(
                    "chat.no_answer",
                    reason="silent",
                    note=f"nothing from run {run_id} for {answer_within:g}s: is a worker "
                    f"running? (`agentrun-worker`); `agentrun status {run_id}` shows where "
                    "it is, `agentrun watch` follows it",
                )
                return
            if not following:
                # The stream from its start: what the run did before it received this message
                # belongs to earlier turns.
                following = item.type == "message.received" and (
                    item.data.get("message_id") == message_id
                )
                if not following:
                    continue
            yield item
            if item.type == "session.turn_answered" and (
                message_id is None or message_id in item.data.get("message_ids", [])
            ):
                return
            if item.type == "approval.requested":
                yield note(
                    "chat.approval_pending",
                    **item.data,
                    next_offset=(item.offset or 0) + 1,
                    note=f"the turn waits for a decision: `agentrun approve {run_id} --by NAME "
                    f"--role {item.data.get('required_role', 'approver')}` or `agentrun reject`",
                )
                return
            if item.type == "receipt":
                return
    finally:
        await items.aclose()  # type: ignore[attr-defined]
